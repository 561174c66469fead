import { INPUT_LENGTH_BANDS, LENGTH_BANDS } from '../../record/observations.ts'
import { liveBucket, SlidingCounter, SlidingSketch } from './sliding-sketch.ts'
import type { SketchLevel } from './sliding-sketch.ts'
import type { FinishedRequest } from './finished-request.ts'
import type { Outcome } from '../../timing/measurement.ts'
import { LiveSpend } from './live-spend.ts'

/**
 * The live page's figures from finished requests: sliding-window sketches and counts per route
 * and model, and bands per route. Pure: times are arguments, so tests drive them.
 */

export const LiveMetric = {
  ttft: 'ttft',
  itl: 'itl',
  tpot: 'tpot',
  e2e: 'e2e',
  tps: 'tps',
  headers: 'headers',
} as const
export type LiveMetric = (typeof LiveMetric)[keyof typeof LiveMetric]
export const LIVE_METRICS: readonly LiveMetric[] = Object.values(LiveMetric)

/** Bands of the requests in flight when a request started (itself included). */
export const CONCURRENCY_BANDS = [
  { name: '1', below: 2 },
  { name: '2–4', below: 5 },
  { name: '5–16', below: 17 },
  { name: '17–64', below: 65 },
  { name: '>64', below: Number.POSITIVE_INFINITY },
] as const

/** The bands are read over the last 5 minutes only (one window keeps them small). */
const BAND_LEVELS: readonly SketchLevel[] = [{ slotMs: 60_000, windows: [5] }]

/** Past this many route × model series, new ones are folded into the route's `other`. */
const MAX_SERIES = 2000

const bandOf = (bands: readonly { readonly below: number }[], value: number): number => {
  let i = 0
  while (value >= bands[i].below) i++
  return i
}

export class Series {
  readonly route: string
  readonly model: string
  provider: string
  readonly sketches: Record<LiveMetric, SlidingSketch> = {
    ttft: new SlidingSketch(),
    itl: new SlidingSketch(),
    tpot: new SlidingSketch(),
    e2e: new SlidingSketch(),
    tps: new SlidingSketch(),
    // Time to response headers: the provider's own wait, before any byte of the answer.
    headers: new SlidingSketch(),
  }
  readonly requests: Record<Outcome, SlidingCounter> = {
    ok: new SlidingCounter(),
    error: new SlidingCounter(),
    cancelled: new SlidingCounter(),
  }
  /** Requests of every outcome: the ranking reads one counter, not three. */
  readonly requestCount = new SlidingCounter()
  readonly tokens = new SlidingCounter()
  readonly stalls = new SlidingCounter()
  /** When the last request ended (ms), to forget series idle for longer than the longest window. */
  lastAt = 0
  /** Creation order: ties in the ranking, and which second refreshes its longer windows. */
  readonly seq: number
  /** Requests over the last 15 minutes when last counted for the ranking (−1: not yet; live-message.ts). */
  busy = -1
  /** Per metric: the quantiles last computed and the sketch version they were computed at. */
  readonly cache = new Map<LiveMetric, { version: number; longVersion: number; values: (number | null)[] }>()

  constructor(route: string, model: string, provider: string, seq: number) {
    this.seq = seq
    this.route = route
    this.model = model
    this.provider = provider
  }

  get byteLength(): number {
    let n = 0
    for (const m of LIVE_METRICS) n += this.sketches[m].byteLength
    return n
  }
}

export class RouteBands {
  readonly seq: number
  /** The bands as last sent, refreshed every few seconds (see live-message.ts). */
  sent: unknown
  constructor(seq: number) {
    this.seq = seq
  }

  readonly length = LENGTH_BANDS.map(() => ({
    itl: new SlidingSketch(BAND_LEVELS),
    tpot: new SlidingSketch(BAND_LEVELS),
  }))
  readonly concurrency = CONCURRENCY_BANDS.map(() => ({
    itl: new SlidingSketch(BAND_LEVELS),
    tpot: new SlidingSketch(BAND_LEVELS),
  }))
  /** TTFT by the prompt's input-length band (the reported input count; the last band: unknown). */
  readonly input = INPUT_LENGTH_BANDS.map(() => new SlidingSketch(BAND_LEVELS))
  /** The route's requests judged against its `slo:` (none when it has no SLO). */
  readonly slo = { met: new SlidingCounter(), missed: new SlidingCounter() }
  /** Streamed requests, and those whose bytes waited over 100 ms for the client's socket (a slow client). */
  readonly streamed = new SlidingCounter()
  readonly slowClients = new SlidingCounter()
  lastAt = 0
}

/** A failed request as the live page lists it, with a link to its `/debug/requests/{id}`. */
export interface RecentFailure {
  readonly id: string
  readonly route: string
  readonly model: string
  readonly status: number
  readonly errorType: string
  readonly endedAt: number
}

/** Failed requests the page lists (the newest). */
const MAX_FAILURES = 10
/** Distinct status codes counted one by one; past this many the rest count under 0 ("other"). */
const MAX_STATUSES = 24

/** 15 minutes and a slot: past this a series with no request is dropped. */
const FORGET_MS = 16 * 60_000

export class LiveStats {
  readonly series = new Map<string, Series>()
  readonly routes = new Map<string, RouteBands>()
  readonly requests: Record<Outcome, SlidingCounter> = {
    ok: new SlidingCounter(),
    error: new SlidingCounter(),
    cancelled: new SlidingCounter(),
  }
  readonly tokens = new SlidingCounter()
  /** Requests with outcome error, by the status they got (200: an error inside the stream; 502/504: the proxy's own). */
  readonly errorStatus = new Map<number, SlidingCounter>()
  /** Requests that were not ok, by their `error_type` (a closed set: no cap needed). */
  readonly errorTypes = new Map<string, SlidingCounter>()
  /** The newest failed requests, newest last. */
  readonly failures: RecentFailure[] = []
  /** Spend by route and model and by tenant (with `pricing:` set). */
  readonly spend = new LiveSpend()
  readonly #maxSeries: number
  #seq = 0
  /** The live message's ranking of the busiest series, kept between messages (live-message.ts). */
  ranking:
    | {
        readonly second: number
        readonly size: number
        readonly shown: readonly Series[]
        readonly fifths: readonly (readonly Series[])[]
      }
    | undefined
  /** When these figures began to be collected (ms, the clock of `now`): a window is covered only since. */
  readonly startedAt: number

  constructor(maxSeries = MAX_SERIES, startedAt = Number.NEGATIVE_INFINITY) {
    this.#maxSeries = maxSeries
    this.startedAt = startedAt
  }

  /** Seconds of a `seconds`-long window ending at `now` that were collected (at least 1): a rate's divisor. */
  covered(seconds: number, now: number): number {
    return Math.max(1, Math.min(seconds, (now - this.startedAt) / 1000))
  }

  add(r: FinishedRequest): void {
    const now = r.endedAt
    const s = this.#series(r)
    s.lastAt = now
    s.provider = r.provider
    s.requests[r.outcome].add(1, now)
    s.requestCount.add(1, now)
    this.requests[r.outcome].add(1, now)
    s.tokens.add(r.outputTokens, now)
    this.tokens.add(r.outputTokens, now)
    if (r.stalls > 0) s.stalls.add(r.stalls, now)
    const sk = s.sketches
    sk.e2e.observe(r.e2e, 1, now)
    if (r.ttft !== undefined) sk.ttft.observe(r.ttft, 1, now)
    if (r.tps !== undefined) sk.tps.observe(r.tps, 1, now)
    if (r.headers !== undefined) sk.headers.observe(r.headers, 1, now)
    if (r.outcome === 'error') this.#failed(r)
    if (r.outcome !== 'ok') {
      let byType = this.errorTypes.get(r.errorType)
      if (byType === undefined) {
        byType = new SlidingCounter()
        this.errorTypes.set(r.errorType, byType)
      }
      byType.add(1, now)
    }
    if (r.cost !== undefined) this.spend.add(r)

    let bands = this.routes.get(r.route)
    if (bands === undefined) {
      bands = new RouteBands(this.#seq++)
      this.routes.set(r.route, bands)
    }
    bands.lastAt = now
    if (r.slo !== undefined) bands.slo[r.slo].add(1, now)
    if (r.slowClient !== undefined) {
      bands.streamed.add(1, now)
      if (r.slowClient) bands.slowClients.add(1, now)
    }
    if (r.ttft !== undefined) bands.input[r.inputLengthBand].observe(r.ttft, 1, now)
    const byLength = bands.length[r.lengthBand]
    const byConcurrency = bands.concurrency[bandOf(CONCURRENCY_BANDS, r.concurrency)]
    if (r.tpot !== undefined) {
      const bucket = liveBucket(r.tpot)
      sk.tpot.observeBucket(r.tpot, bucket, 1, now)
      byLength.tpot.observeBucket(r.tpot, bucket, 1, now)
      byConcurrency.tpot.observeBucket(r.tpot, bucket, 1, now)
    }
    // Token-weighted ITL: k_j observations of g_j / k_j for each chunk j ≥ 2, a run of equal
    // chunks at once, its bucket found once for the three sketches.
    const gaps = r.gaps
    for (let j = 0; j < gaps.count; j++) {
      const k = gaps.tokens[j]
      // A chunk of 0 tokens has weight 0: the sketches take nothing.
      const v = gaps.seconds[j] / k
      const weight = k * gaps.times[j]
      const bucket = liveBucket(v)
      sk.itl.observeBucket(v, bucket, weight, now)
      byLength.itl.observeBucket(v, bucket, weight, now)
      byConcurrency.itl.observeBucket(v, bucket, weight, now)
    }
  }

  /** Drops series and routes with no request in the longest window (bounded memory over time). */
  forget(now: number): void {
    for (const [key, s] of this.series) if (now - s.lastAt > FORGET_MS) this.series.delete(key)
    for (const [route, b] of this.routes) if (now - b.lastAt > FORGET_MS) this.routes.delete(route)
  }

  get byteLength(): number {
    let n = 0
    for (const s of this.series.values()) n += s.byteLength
    for (const b of this.routes.values()) {
      for (const band of [...b.length, ...b.concurrency]) n += band.itl.byteLength + band.tpot.byteLength
      for (const sketch of b.input) n += sketch.byteLength
    }
    return n
  }

  #failed(r: FinishedRequest): void {
    let status = r.statusCode
    if (!this.errorStatus.has(status) && this.errorStatus.size >= MAX_STATUSES) status = 0
    let c = this.errorStatus.get(status)
    if (c === undefined) {
      c = new SlidingCounter()
      this.errorStatus.set(status, c)
    }
    c.add(1, r.endedAt)
    this.failures.push({
      id: r.id,
      route: r.route,
      model: r.model,
      status: r.statusCode,
      errorType: r.errorType,
      endedAt: r.endedAt,
    })
    if (this.failures.length > MAX_FAILURES) this.failures.shift()
  }

  #series(r: FinishedRequest): Series {
    const key = `${r.route}\u0000${r.model}`
    let s = this.series.get(key)
    if (s !== undefined) return s
    if (this.series.size >= this.#maxSeries) {
      const other = `${r.route}\u0000other`
      s = this.series.get(other)
      if (s !== undefined) return s
      s = new Series(r.route, 'other', r.provider, this.#seq++)
      this.series.set(other, s)
      return s
    }
    s = new Series(r.route, r.model, r.provider, this.#seq++)
    this.series.set(key, s)
    return s
  }
}
