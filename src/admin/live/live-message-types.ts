/**
 * The live page's message on the wire, shared by the server (live-message.ts) and the page
 * (client/app.ts); types only, so the browser build checks the script without the server's code.
 * Times and durations are whole µs and shares whole parts per 10,000 (see live-message.ts).
 */

type PerWindow = number[]
/** Per window [p50, p95, p99, count], flattened: 12 numbers, null for no value. */
export type WindowQuantiles = (number | null)[]
/** [p50, p99, count] over the last 5 minutes. */
type BandQuantiles = (number | null)[]
/** live-stats.ts's LiveMetric. */
type Metric = 'ttft' | 'itl' | 'tpot' | 'e2e' | 'tps' | 'headers'

export interface SeriesView {
  route: string
  model: string
  provider: string
  ok: PerWindow
  error: PerWindow
  cancelled: PerWindow
  total: { ok: number; error: number; cancelled: number }
  tokensPerSecond: PerWindow
  stalls: PerWindow
  /** µs, except `tps` (tokens/s to 0.1). */
  q: Record<Metric, WindowQuantiles>
  /** The ITL distribution of the last 5 minutes (the busiest series only): bars' lower edges and shares; `zero`: the share of 0 µs. */
  dist?: { zero: number; x: number[]; y: number[] }
}

export interface RouteView {
  route: string
  length: { band: string; itl: BandQuantiles; tpot: BandQuantiles }[]
  concurrency: { band: string; itl: BandQuantiles; tpot: BandQuantiles }[]
  input: { band: string; ttft: BandQuantiles }[]
  clients: { streamed: PerWindow; slow: PerWindow }
}

export interface StreamView {
  id: string
  route: string
  provider: string
  model: string | null
  /** t_req. */
  t0: number
  chunks: number
  tokens: number
  ttft: number | null
  /** Since the last content chunk (0 once ended). */
  gap: number
  maxGap: number
  stalls: number
  /** The content chunks not sent before, after t0. */
  ticks: number[]
  /** Tokens per tick, present only when some chunk is not one token. */
  k?: number[]
  ended?: true
}

/** With `pricing:` set: sums in the price table's currency. */
export interface SpendView {
  currency: string
  total: PerWindow
  byModel: { route: string; model: string; spent: PerWindow; estimated: PerWindow }[]
  byTenant: { tenant: string; spent: PerWindow; estimated: PerWindow }[]
}

/** Realtime sessions (realtime-live.ts). */
export interface RealtimeMessage {
  open: number
  /** The oldest open sessions; `age` since the upgrade request. */
  sessions: { id: string; route: string; provider: string; model: string | null; age: number; responses: number }[]
  series: {
    route: string
    model: string
    provider: string
    sessions: PerWindow
    ok: PerWindow
    error: PerWindow
    cancelled: PerWindow
    audio: PerWindow
    noticeable: PerWindow
    q: { ttft: WindowQuantiles; ttfa: WindowQuantiles; itl: WindowQuantiles; underrun: WindowQuantiles }
  }[]
}

/** The process's own figures (process-figures.ts). */
export interface ProcessView {
  readonly instance: string
  readonly pid: number
  readonly version: string
  readonly node: string
  /** Seconds since the process started. */
  readonly uptime: number
  /** CPU used since the previous read, per 10,000 of one core (user + system). */
  readonly cpu: number | null
  /** Event-loop delay since the previous read, whole µs. */
  readonly loopP99: number | null
  readonly loopMax: number | null
  /** Bytes. */
  readonly rss: number
  readonly heapUsed: number
}

export interface LiveMessage {
  now: number
  stallSeconds: number
  system: {
    inFlight: number
    tokensPerSecond: PerWindow
    ok: PerWindow
    error: PerWindow
    cancelled: PerWindow
    total: { ok: number; error: number; cancelled: number }
    /** Status 0: the statuses past the ones counted one by one. */
    errorsByStatus: { status: number; n: PerWindow }[]
    errorsByType: { type: string; n: PerWindow }[]
  }
  slo: { route: string; met: PerWindow; missed: PerWindow }[]
  /** Oldest first; `ago` since it ended. */
  failures: { id: string; route: string; model: string; status: number; errorType: string; ago: number }[]
  spend: SpendView | undefined
  series: SeriesView[]
  omittedSeries: number
  routes: RouteView[]
  streams: StreamView[]
  omittedStreams: number
  realtime?: RealtimeMessage
  process?: ProcessView
}
