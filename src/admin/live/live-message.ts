import type { ChunkLog } from '../../timing/chunk-log.ts'
import { INPUT_LENGTH_BANDS, LENGTH_BANDS } from '../../record/observations.ts'
import { bucketUpper } from '../../histogram/mapping.ts'
import type { SlidingSketch } from './sliding-sketch.ts'
import { CONCURRENCY_BANDS, LIVE_METRICS } from './live-stats.ts'
import type { LiveMetric, LiveStats, Series } from './live-stats.ts'
import type { LiveMessage, RouteView, SeriesView, StreamView, WindowQuantiles } from './live-message-types.ts'

/**
 * One server-sent message of the live page, bounded whatever the traffic (MAX_SERIES_SHOWN,
 * MAX_STREAMS_SHOWN, MAX_TICKS); only changed sketches are re-read and streams send new chunks only.
 */

/** What the strip reads of a request in flight (an Exchange has all of it). */
export interface InFlight {
  readonly id: string
  readonly route: { readonly label: string }
  readonly provider: string
  readonly requestModel: string | undefined
  /** t_req, ms on the monotonic clock. */
  readonly tReq: number
  readonly chunks: ChunkLog
}

export const MAX_SERIES_SHOWN = 40
export const MAX_STREAMS_SHOWN = 48
/** Series whose ITL distribution is sent (the busiest). */
const MAX_DISTRIBUTIONS = 12
/** Ticks of a stream in one message; a faster stream shows its latest. */
const MAX_TICKS = 2000
/** The strip's time span: a stream seen for the first time sends its chunks of this long. */
const STRIP_MS = 30_000
/** The 5- and 15-minute figures move slowly: each series refreshes them this often, staggered so every message does a like share. */
export const LONG_REFRESH_SECONDS = 5
/** Quantiles of every window: p50, p95, p99. */
const QS = [0.5, 0.95, 0.99] as const
/** Buckets merged into one bar of the distribution chart (16 at schema 6: bars ≈ 19 % wide). */
const DIST_GROUP = 16

/** Per stream, what earlier messages already covered (kept per SSE audience). */
interface StreamCursor {
  /** The next chunk to send. */
  next: number
  stalls: number
  maxGap: number
  tokens: number
}

/**
 * Per SSE audience, the streams it has been sent; an ended stream is sent once more, marked
 * `ended`, so a stall inside one message interval still reaches the page.
 */
export type Cursors = Map<InFlight, StreamCursor>

// On the wire times are whole µs and shares whole parts per 10,000: JSON.stringify writes integers
// much faster than decimals, and the page divides once (client/app.ts, decode).
const r2 = (x: number): number => Math.round(x * 100) / 100
/** Tokens/s to 0.1; null for no value. */
const tenths = (x: number): number | null => (Number.isNaN(x) ? null : Math.round(x * 10) / 10)
/** Seconds → whole µs; null for no value. */
const micros = (seconds: number): number | null => (Number.isNaN(seconds) ? null : Math.round(seconds * 1e6))
/** Milliseconds (the monotonic clock's unit) → whole µs. */
const msToMicros = (milliseconds: number): number => Math.round(milliseconds * 1000)
/** A share (0 … 1) → whole parts per 10,000. */
const perTenThousand = (share: number): number => Math.round(share * 10_000)

/** Per window [p50, p95, p99, count], flattened (12 numbers), for one sketch. */
function windowQuantiles(
  s: Series,
  metric: (typeof LIVE_METRICS)[number],
  now: number,
  scratch: number[],
  refreshLong: boolean,
): (number | null)[] {
  const sketch = s.sketches[metric]
  sketch.advance(now)
  const cached = s.cache.get(metric)
  const version = sketch.version
  if (cached !== undefined && cached.version === version && (cached.longVersion === version || !refreshLong))
    return cached.values
  const long = refreshLong || cached === undefined
  const values: (number | null)[] = new Array(12)
  const perSecond = metric === 'tps'
  for (let w = 0; w < 3; w++) {
    const at = w * 4
    if (w > 0 && !long) {
      const old = (cached as { values: (number | null)[] }).values
      for (let i = at; i < at + 4; i++) values[i] = old[i]
      continue
    }
    const count = sketch.read(w, QS, scratch)
    for (let i = 0; i < 3; i++) values[at + i] = perSecond ? tenths(scratch[i]) : micros(scratch[i])
    values[at + 3] = Math.round(count)
  }
  s.cache.set(metric, {
    version,
    longVersion: long ? version : (cached as { longVersion: number }).longVersion,
    values,
  })
  return values
}

/** The ITL distribution of the last 5 minutes as bars (lower edges in µs, shares); `zero` is the share a log axis cannot show. */
function distribution(sketch: SlidingSketch, now: number): { zero: number; x: number[]; y: number[] } {
  const x: number[] = []
  const y: number[] = []
  const h = sketch.window(1, now)
  const total = h.count
  if (total <= 0) return { zero: 0, x, y }
  const schema = h.schema as number
  let group = Number.NaN
  h.forEachBucket((index, count) => {
    // Bucket i holds (upper(i − 1), upper(i)]: a group's bar starts at its first bucket's lower edge.
    const g = Math.floor((index - 1) / DIST_GROUP)
    if (g !== group) {
      group = g
      x.push(micros(bucketUpper(g * DIST_GROUP, schema)) as number)
      y.push(0)
    }
    y[y.length - 1] += count / total
  })
  for (let i = 0; i < y.length; i++) y[i] = perTenThousand(y[i])
  return { zero: perTenThousand(h.zeroCount / total), x, y }
}

function bandQuantiles(sketch: SlidingSketch, now: number, scratch: number[]): (number | null)[] {
  sketch.quantiles(0, [0.5, 0.99], now, scratch)
  return [micros(scratch[0]), micros(scratch[1]), Math.round(sketch.count(0, now))]
}

/** A stream's entry, advancing its cursor over the chunks that arrived since. */
function streamView(ex: InFlight, now: number, cursors: Cursors, stallMs: number, ended: boolean): StreamView {
  const log = ex.chunks
  const n = log.count
  let c = cursors.get(ex)
  if (c === undefined) {
    c = { next: 0, stalls: 0, maxGap: 0, tokens: 0 }
    cursors.set(ex, c)
  }
  // Chunks before the strip's span update the figures but are not drawn.
  let firstTick = c.next
  if (firstTick === 0 && n > 0 && now - log.at(0) > STRIP_MS) {
    let lo = 0
    let hi = n
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (now - log.at(mid) > STRIP_MS) lo = mid + 1
      else hi = mid
    }
    firstTick = lo
  }
  firstTick = Math.max(firstTick, n - MAX_TICKS)
  for (let i = c.next; i < n; i++) {
    c.tokens += log.tokens(i)
    if (i > 0) {
      const gap = log.at(i) - log.at(i - 1)
      if (gap > c.maxGap) c.maxGap = gap
      if (gap > stallMs) c.stalls++
    }
  }
  const ticks: number[] = []
  let k: number[] | undefined
  for (let i = firstTick; i < n; i++) {
    const tokens = log.tokens(i)
    // Token counts go only when some chunk is not one token (a burst).
    if (tokens !== 1 && k === undefined) k = ticks.map(() => 1)
    k?.push(tokens)
    ticks.push(msToMicros(log.at(i) - ex.tReq))
  }
  c.next = n
  const model = ex.requestModel
  return {
    id: ex.id,
    route: ex.route.label,
    provider: ex.provider,
    model: model === undefined ? null : model.slice(0, 128),
    t0: msToMicros(ex.tReq),
    chunks: n,
    tokens: c.tokens,
    ttft: n === 0 ? null : msToMicros(log.at(0) - ex.tReq),
    gap: ended ? 0 : msToMicros(now - (n === 0 ? ex.tReq : log.at(n - 1))),
    maxGap: msToMicros(c.maxGap),
    stalls: c.stalls,
    ticks,
    ...(k === undefined ? {} : { k }),
    ...(ended ? { ended: true } : {}),
  }
}

const inFlightShown = (streams: StreamView[]): number => streams.reduce((n, s) => (s.ended === true ? n : n + 1), 0)

const requestsIn = (s: Series, w: number, now: number): number => s.requestCount.sum(w, now)

const WINDOW_SECONDS = [60, 300, 900] as const

/** Ranks first: more requests, then created earlier. */
const before = (a: Series, b: Series): boolean => a.busy > b.busy || (a.busy === b.busy && a.seq < b.seq)

/** The `k` busiest series, busiest first, in one pass keeping the best `k` sorted. */
function busiest(all: Iterable<Series>, k: number): Series[] {
  const top: Series[] = []
  for (const s of all) {
    if (top.length === k) {
      if (!before(s, top[k - 1])) continue
      top.pop()
    }
    let i = top.length
    top.push(s)
    for (; i > 0 && before(s, top[i - 1]); i--) top[i] = top[i - 1]
    top[i] = s
  }
  return top
}

/** Builds one message at `now` (monotonic ms); `cursors` is per audience, `inFlight` may exceed `active` (the cluster's mirror). */
export function buildMessage(
  stats: LiveStats,
  active: ReadonlySet<InFlight>,
  now: number,
  cursors: Cursors,
  stallSeconds: number,
  inFlight = active.size,
): LiveMessage {
  const scratch: number[] = [0, 0, 0]
  const second = Math.floor(now / 1000)
  // The busiest series are re-ranked every few seconds (at once when one comes or goes), each message
  // recounting a staggered fifth of them, so no message pays for all of them.
  let ranking = stats.ranking
  if (ranking !== undefined && ranking.second !== second) {
    // The fifth with (second + seq) % LONG_REFRESH_SECONDS === 0, whose long windows refresh now.
    for (const s of ranking.fifths[(LONG_REFRESH_SECONDS - (second % LONG_REFRESH_SECONDS)) % LONG_REFRESH_SECONDS])
      s.busy = requestsIn(s, 2, now)
  }
  if (
    ranking === undefined ||
    ranking.size !== stats.series.size ||
    (second % LONG_REFRESH_SECONDS === 0 && ranking.second !== second)
  ) {
    stats.forget(now)
    const fifths: Series[][] = Array.from({ length: LONG_REFRESH_SECONDS }, () => [])
    for (const s of stats.series.values()) {
      if (s.busy < 0) s.busy = requestsIn(s, 2, now)
      fifths[s.seq % LONG_REFRESH_SECONDS].push(s)
    }
    ranking = stats.ranking = {
      second,
      size: stats.series.size,
      shown: busiest(stats.series.values(), MAX_SERIES_SHOWN),
      fifths,
    }
  } else if (ranking.second !== second) {
    ranking = stats.ranking = { ...ranking, second }
  }
  const shown = ranking.shown
  const series = shown.map((s, i): SeriesView => {
    const q = {} as Record<LiveMetric, WindowQuantiles>
    const refreshLong = (second + s.seq) % LONG_REFRESH_SECONDS === 0
    for (const m of LIVE_METRICS) q[m] = windowQuantiles(s, m, now, scratch, refreshLong)
    const counts = (c: { sum(w: number, now: number): number }): number[] => [
      c.sum(0, now),
      c.sum(1, now),
      c.sum(2, now),
    ]
    return {
      route: s.route,
      model: s.model,
      provider: s.provider,
      ok: counts(s.requests.ok),
      error: counts(s.requests.error),
      cancelled: counts(s.requests.cancelled),
      total: { ok: s.requests.ok.total, error: s.requests.error.total, cancelled: s.requests.cancelled.total },
      tokensPerSecond: WINDOW_SECONDS.map((sec, w) => r2(s.tokens.sum(w, now) / stats.covered(sec, now))),
      stalls: counts(s.stalls),
      q,
      ...(i < MAX_DISTRIBUTIONS ? { dist: distribution(s.sketches.itl, now) } : {}),
    }
  })
  const windowCounts = (c: { sum(w: number, now: number): number }): number[] => [
    c.sum(0, now),
    c.sum(1, now),
    c.sum(2, now),
  ]
  const routes: RouteView[] = []
  for (const route of new Set(shown.map((s) => s.route))) {
    const b = stats.routes.get(route)
    if (b === undefined) continue
    // Counts are cheap to read: fresh every message, unlike the bands' quantiles.
    const clients = { streamed: windowCounts(b.streamed), slow: windowCounts(b.slowClients) }
    if (b.sent !== undefined && (second + b.seq) % LONG_REFRESH_SECONDS !== 0) {
      routes.push({ ...(b.sent as Omit<RouteView, 'clients'>), clients })
      continue
    }
    const sent = {
      route,
      length: LENGTH_BANDS.map((band, i) => ({
        band: band.name,
        itl: bandQuantiles(b.length[i].itl, now, scratch),
        tpot: bandQuantiles(b.length[i].tpot, now, scratch),
      })),
      concurrency: CONCURRENCY_BANDS.map((band, i) => ({
        band: band.name,
        itl: bandQuantiles(b.concurrency[i].itl, now, scratch),
        tpot: bandQuantiles(b.concurrency[i].tpot, now, scratch),
      })),
      input: INPUT_LENGTH_BANDS.map((band, i) => ({ band: band.name, ttft: bandQuantiles(b.input[i], now, scratch) })),
    }
    b.sent = sent
    routes.push({ ...sent, clients })
  }
  const streams: StreamView[] = []
  const stallMs = stallSeconds * 1000
  for (const ex of cursors.keys()) {
    if (active.has(ex)) continue
    if (streams.length < MAX_STREAMS_SHOWN) streams.push(streamView(ex, now, cursors, stallMs, true))
    cursors.delete(ex)
  }
  for (const ex of active) {
    if (streams.length >= MAX_STREAMS_SHOWN) break
    streams.push(streamView(ex, now, cursors, stallMs, false))
  }
  const counts = (c: { sum(w: number, now: number): number }): number[] => [c.sum(0, now), c.sum(1, now), c.sum(2, now)]
  // What an SRE looks for first: failures by status, the newest failed requests, goodput per route with an `slo:`.
  const errorsByStatus: { status: number; n: number[] }[] = []
  for (const [status, c] of stats.errorStatus) {
    const n = counts(c)
    if (n[2] > 0) errorsByStatus.push({ status, n })
  }
  errorsByStatus.sort((a, b) => b.n[2] - a.n[2] || a.status - b.status)
  // The same requests and the cancelled ones by who is to blame (the error_type label).
  const errorsByType: { type: string; n: number[] }[] = []
  for (const [type, c] of stats.errorTypes) {
    const n = counts(c)
    if (n[2] > 0) errorsByType.push({ type, n })
  }
  errorsByType.sort((a, b) => b.n[2] - a.n[2] || (a.type < b.type ? -1 : 1))
  const slo: { route: string; met: number[]; missed: number[] }[] = []
  for (const [route, b] of stats.routes) {
    const met = counts(b.slo.met)
    const missed = counts(b.slo.missed)
    if (met[2] + missed[2] > 0) slo.push({ route, met, missed })
  }
  const failures = stats.failures.map((f) => ({
    id: f.id,
    route: f.route,
    model: f.model,
    status: f.status,
    errorType: f.errorType,
    ago: msToMicros(now - f.endedAt),
  }))
  return {
    now: msToMicros(now),
    stallSeconds,
    system: {
      inFlight,
      tokensPerSecond: WINDOW_SECONDS.map((sec, w) => r2(stats.tokens.sum(w, now) / stats.covered(sec, now))),
      ok: counts(stats.requests.ok),
      error: counts(stats.requests.error),
      cancelled: counts(stats.requests.cancelled),
      total: {
        ok: stats.requests.ok.total,
        error: stats.requests.error.total,
        cancelled: stats.requests.cancelled.total,
      },
      errorsByStatus,
      errorsByType,
    },
    slo,
    failures,
    spend: stats.spend.view(now),
    series,
    omittedSeries: ranking.size - shown.length,
    routes,
    streams,
    omittedStreams: Math.max(0, inFlight - inFlightShown(streams)),
  }
}
