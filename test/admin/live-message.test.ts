import t from 'tap'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { fromObservations } from '../../src/admin/live/finished-request.ts'
import { observationsOf } from '../helpers/observe.ts'
import type { FinishedRequest } from '../../src/admin/live/finished-request.ts'
import { LiveStats } from '../../src/admin/live/live-stats.ts'
import { buildMessage, LONG_REFRESH_SECONDS, MAX_SERIES_SHOWN, MAX_STREAMS_SHOWN } from '../../src/admin/live/live-message.ts'
import type { Cursors, InFlight } from '../../src/admin/live/live-message.ts'
import { RecentRequests, requestView } from '../../src/admin/live/recent-requests.ts'

/** A log with content chunks at the given times (ms) and token counts. */
function log(marks: [number, number][]): ChunkLog {
  const l = new ChunkLog()
  for (const [at, k] of marks) l.add(at, k, MarkKind.text, false)
  return l
}

/** A finished request from a hand-made schedule: t_req = 0 … t_end, chunks at `marks`. */
function finished(marks: [number, number][], tEnd: number, endedAt: number, over: Partial<FinishedRequest> = {}): FinishedRequest {
  const m = measure({ tReq: 0, tEnd, tHeaders: 10, statusCode: 200, failure: undefined, clientGone: false, chunks: log(marks), summary: {}, stallSeconds: 1 })
  const r = fromObservations(observationsOf(m, { id: 'r', provider: 'openai', model: 'm', route: '/sim' }))
  return { ...r, endedAt, ...over }
}

type Msg = {
  system: { inFlight: number; ok: number[]; error: number[]; cancelled: number[]; tokensPerSecond: number[]; total: Record<string, number> }
  series: { route: string; model: string; ok: number[]; error: number[]; stalls: number[]; q: Record<string, (number | null)[]>; dist?: { zero: number; x: number[]; y: number[] } }[]
  omittedSeries: number
  routes: {
    route: string
    length: { band: string; itl: (number | null)[]; tpot: (number | null)[] }[]
    concurrency: { band: string; itl: (number | null)[] }[]
    input: { band: string; ttft: (number | null)[] }[]
  }[]
  streams: { id: string; chunks: number; tokens: number; stalls: number; maxGap: number; gap: number; ticks: number[]; k?: number[]; ended?: true }[]
  omittedStreams: number
}
const build = (stats: LiveStats, active: InFlight[], now: number, cursors: Cursors = new Map()): Msg => buildMessage(stats, new Set(active), now, cursors, 1) as unknown as Msg

t.test('a finished request from a known schedule gives its exact figures', async (t) => {
  // t_req 0; chunks at 100 ms (1 token), 150 (1), 1650 (2: a 1.5 s stall), 1700 (1); end 1800.
  const r = finished(
    [
      [100, 1],
      [150, 1],
      [1650, 2],
      [1700, 1],
    ],
    1800,
    1800,
  )
  t.equal(r.ttft, 0.1)
  t.equal(r.e2e, 1.8)
  t.equal(r.chunks, 4)
  t.equal(r.stalls, 1, 'one gap longer than 1 s')
  t.same([...r.gaps.seconds.subarray(0, r.gaps.count)], [0.05, 1.5, 0.05])
  t.same([...r.gaps.tokens.subarray(0, r.gaps.count)], [1, 2, 1])
  t.same([...r.gaps.times.subarray(0, r.gaps.count)], [1, 1, 1])
  t.equal(r.maxGap, 1.5)
  // (1700 − 100) ms over N − k_1 = 4 tokens.
  t.equal(r.tpot, 0.4)
  t.equal(r.itlP99, 0.75, 'the stall split over its two tokens')
  const m = measure({ tReq: 1000, tEnd: 2800, tHeaders: 1010, statusCode: 200, failure: undefined, clientGone: false, chunks: log([[1100, 1]]), summary: {}, stallSeconds: 1 })
  t.equal(fromObservations(observationsOf(m, { id: 'x', concurrency: 3, tReq: 1000 })).endedAt, 2800, 'it ended at t_req + E2E')
})

t.test('the message holds counts by outcome, window quantiles and the bands', async (t) => {
  const stats = new LiveStats()
  stats.add(
    finished(
      [
        [100, 1],
        [150, 1],
        [1650, 2],
        [1700, 1],
      ],
      1800,
      10_000,
      { inputLengthBand: 1 },
    ),
  )
  stats.add(
    finished(
      [
        [200, 1],
        [220, 1],
      ],
      300,
      11_000,
      { outcome: 'error', statusCode: 500, tpot: undefined, tps: undefined },
    ),
  )
  stats.add(finished([], 50, 12_000, { outcome: 'cancelled', statusCode: 499, ttft: undefined, tpot: undefined, tps: undefined }))
  const m = build(stats, [], 12_500)
  t.same(m.system.ok, [1, 1, 1])
  t.same(m.system.error, [1, 1, 1])
  t.same(m.system.cancelled, [1, 1, 1])
  t.same(m.system.total, { ok: 1, error: 1, cancelled: 1 })
  t.equal(m.series.length, 1)
  const s = m.series[0]
  t.equal(s.route, '/sim')
  t.equal(s.model, 'm')
  t.same(s.stalls, [1, 1, 1])
  // TTFT of the two requests that had content: 100 and 200 ms (in µs on the wire); count 2 in every window.
  const ttft = s.q.ttft
  t.same([ttft[3], ttft[7], ttft[11]], [2, 2, 2])
  t.ok(Math.abs((ttft[0] as number) - 100_000) <= 1000, `p50 ${ttft[0]} µs`)
  t.ok(Math.abs((ttft[2] as number) - 200_000) <= 2000, `p99 ${ttft[2]} µs`)
  // Token-weighted ITL: 50 ms ×1, 750 ms ×2, 50 ms ×1 (first) and 20 ms ×1 (second): 5 tokens.
  t.equal(s.q.itl[3], 5)
  t.ok(Math.abs((s.q.itl[2] as number) - 750_000) <= 7500, `ITL p99 ${s.q.itl[2]} µs`)
  t.ok(Math.abs((s.q.itl[0] as number) - 50_000) <= 500, `ITL p50 ${s.q.itl[0]} µs`)
  t.equal(s.q.tpot[3], 1, 'TPOT only for the ok request')
  t.equal(s.q.e2e[3], 3, 'E2E for every request')
  t.ok(s.dist !== undefined && Math.abs(s.dist.zero + s.dist.y.reduce((a, b) => a + b, 0) - 10_000) <= 2, 'the distribution sums to 10,000 parts')
  t.equal(s.dist?.zero, 0, 'no 0 ms gaps in this schedule')
  const bands = m.routes[0]
  t.equal(bands.route, '/sim')
  t.same(
    bands.length.map((b) => b.itl[2]),
    [5, 0, 0],
    'all five tokens in the short band',
  )
  t.same(
    bands.concurrency.map((b) => b.itl[2]),
    [5, 0, 0, 0, 0],
    'all at concurrency 1',
  )
  t.same(
    bands.input.map((b) => [b.band, b.ttft[2]]),
    [
      ['lt_1k', 0],
      ['lt_8k', 1],
      ['lt_32k', 0],
      ['lt_128k', 0],
      ['ge_128k', 0],
      ['unknown', 1],
    ],
    'TTFT by prompt band: one request of 1k–8k input tokens, one with no reported count; the cancelled one had no TTFT',
  )
  t.ok(Math.abs((bands.input[1].ttft[0] as number) - 100_000) <= 1000, `the 1k–8k band's TTFT p50 ${bands.input[1].ttft[0]} µs`)
})

t.test("a route's slow clients: streamed requests whose bytes waited over 100 ms for the client's socket, by window", async (t) => {
  const stats = new LiveStats()
  // Four streamed requests at 10 s: waits of 0, 100 ms (not over), 150 ms and 2 s; one whole answer (no wait figure).
  for (const [i, wait] of [0, 0.1, 0.15, 2].entries()) {
    const m = measure({
      tReq: 0,
      tEnd: 300,
      tHeaders: 10,
      statusCode: 200,
      failure: undefined,
      clientGone: false,
      chunks: log([[100, 1]]),
      summary: {},
      stallSeconds: 1,
      clientWriteWaitMs: wait * 1000,
    })
    stats.add({ ...fromObservations(observationsOf(m, { id: `s${i}`, provider: 'openai', model: 'm', route: '/sim' })), endedAt: 10_000 })
  }
  stats.add(finished([], 300, 10_000, { id: 'whole' }))
  // One more slow one 2 minutes later: in the 5- and 15-minute windows with the rest, alone in the last minute.
  const late = measure({ tReq: 0, tEnd: 300, tHeaders: 10, statusCode: 200, failure: undefined, clientGone: false, chunks: log([[100, 1]]), summary: {}, stallSeconds: 1, clientWriteWaitMs: 500 })
  stats.add({ ...fromObservations(observationsOf(late, { id: 'late', provider: 'openai', model: 'm', route: '/sim' })), endedAt: 130_000 })
  const route = build(stats, [], 130_000).routes[0] as unknown as { clients: { streamed: number[]; slow: number[] } }
  t.same(route.clients, { streamed: [1, 5, 5], slow: [1, 3, 3] })
})

t.test('requests move out of the 1-minute window while staying in the longer ones', async (t) => {
  const stats = new LiveStats()
  stats.add(
    finished(
      [
        [100, 1],
        [150, 1],
      ],
      200,
      1_000,
    ),
  )
  const later = build(stats, [], 75_000)
  t.same(later.system.ok, [0, 1, 1])
  t.same(later.series[0].ok, [0, 1, 1])
  t.equal(later.series[0].q.ttft[0], null, 'no TTFT in the last minute')
  t.equal(later.series[0].q.ttft[7], 1, 'one in the last 5 minutes')
  const gone = build(stats, [], 20 * 60_000)
  t.equal(gone.series.length, 0, 'a series idle for longer than 15 minutes is forgotten')
  t.same(gone.system.total, { ok: 1, error: 0, cancelled: 0 })
})

t.test('at most MAX_SERIES_SHOWN series are sent, the busiest first', async (t) => {
  const stats = new LiveStats()
  for (let i = 0; i < MAX_SERIES_SHOWN + 5; i++) {
    for (let n = 0; n <= i % 3; n++) stats.add(finished([[10, 1]], 20, 1000 + i, { model: `m${i}` }))
  }
  const m = build(stats, [], 2000)
  t.equal(m.series.length, MAX_SERIES_SHOWN)
  t.equal(m.omittedSeries, 5)
  t.equal(m.series[0].ok[0], 3, 'the busiest come first')
})

t.test('the series shown are the busiest of a full sort, ties by creation order', async (t) => {
  const stats = new LiveStats()
  // 120 series created in a scrambled order, with 1 … 4 requests each: many ties.
  const created: { model: string; n: number }[] = []
  for (let i = 0; i < 120; i++) {
    const model = `m${(i * 37) % 120}`
    const n = 1 + ((i * 7) % 4)
    created.push({ model, n })
    for (let k = 0; k < n; k++) stats.add(finished([[10, 1]], 20, 1000 + i, { model }))
  }
  const want = (xs: { model: string; n: number }[]): string[] =>
    xs
      .map((x, seq) => ({ ...x, seq }))
      .sort((a, b) => b.n - a.n || a.seq - b.seq)
      .slice(0, MAX_SERIES_SHOWN)
      .map((x) => x.model)
  const m = build(stats, [], 2000)
  t.same(
    m.series.map((s) => s.model),
    want(created),
  )
  // More requests for the last-created series: at the next ranking second they lead.
  for (const x of created.slice(-50)) {
    for (let k = 0; k < 4; k++) stats.add(finished([[10, 1]], 20, 3000, { model: x.model }))
    x.n += 4
  }
  const cursors: Cursors = new Map()
  for (let at = 3000; at <= 10_000; at += 1000) build(stats, [], at, cursors)
  t.same(
    build(stats, [], 10_000, cursors).series.map((s) => s.model),
    want(created),
    'every series recounted, then ranked again',
  )
})

t.test('past the series limit new models share the route’s other series', async (t) => {
  const stats = new LiveStats(2)
  for (const model of ['a', 'b', 'c', 'd']) stats.add(finished([[10, 1]], 20, 1000, { model }))
  t.same([...stats.series.values()].map((s) => s.model).sort(), ['a', 'b', 'other'])
  t.equal([...stats.series.values()].find((s) => s.model === 'other')?.requests.ok.total, 2)
})

t.test('each stream sends only the chunks that arrived since the previous message', async (t) => {
  const stats = new LiveStats()
  const chunks = log([
    [1100, 1],
    [1150, 3],
  ])
  const ex: InFlight = { id: 's1', route: { label: '/sim' }, provider: 'openai', requestModel: 'm', tReq: 1000, chunks }
  const cursors: Cursors = new Map()
  const first = build(stats, [ex], 2000, cursors)
  t.same(first.streams[0].ticks, [100_000, 150_000], 'µs after t_req')
  t.same(first.streams[0].k, [1, 3])
  t.equal(first.streams[0].tokens, 4)
  chunks.add(2700, 1, MarkKind.text, false)
  const second = build(stats, [ex], 3000, cursors)
  t.same(second.streams[0].ticks, [1_700_000], 'only the new chunk')
  t.equal(second.streams[0].k, undefined, 'no token counts when all are 1')
  t.equal(second.streams[0].stalls, 1, 'the 1.55 s gap is a stall')
  t.equal(second.streams[0].maxGap, 1_550_000)
  t.equal(second.streams[0].gap, 300_000)
  t.equal(second.streams[0].tokens, 5)
  const fresh = build(stats, [ex], 3000)
  t.same(fresh.streams[0].ticks, [100_000, 150_000, 1_700_000], 'a new audience gets the whole strip')
})

t.test('a stream that stalled and ended between two messages is sent once more, ended, with its stall', async (t) => {
  const stats = new LiveStats()
  const chunks = log([
    [1100, 1],
    [1150, 1],
  ])
  const ex: InFlight = { id: 's1', route: { label: '/sim' }, provider: 'openai', requestModel: 'm', tReq: 1000, chunks }
  const cursors: Cursors = new Map()
  const first = build(stats, [ex], 1200, cursors)
  t.equal(first.streams[0].ended, undefined, 'in flight')
  // Between the two messages: a 1.2 s gap (a stall, the threshold is 1 s), one more chunk, the end.
  chunks.add(2350, 1, MarkKind.text, false)
  chunks.add(2400, 1, MarkKind.text, false)
  const after = build(stats, [], 2700, cursors)
  t.equal(after.streams.length, 1)
  t.same(after.streams[0].ticks, [1_350_000, 1_400_000], 'its last chunks')
  t.equal(after.streams[0].stalls, 1, 'the stall the page never saw in flight')
  t.equal(after.streams[0].maxGap, 1_200_000)
  t.equal(after.streams[0].gap, 0, 'an ended stream waits for nothing')
  t.equal(after.streams[0].ended, true)
  t.equal(after.omittedStreams, 0)
  t.equal(cursors.size, 0, 'then its cursor is dropped')
  t.same(build(stats, [], 3700, cursors).streams, [], 'and it is not sent again')
})

t.test('every number on the wire is a whole number but tokens per second: µs and parts per 10,000', async (t) => {
  const stats = new LiveStats()
  stats.add(
    finished(
      [
        [100.1234, 1],
        [150.5678, 2],
        [1650.9, 1],
      ],
      1800.4321,
      1_000,
    ),
  )
  const chunks = log([
    [1100.25, 1],
    [1150.75, 2],
  ])
  const ex: InFlight = { id: 's1', route: { label: '/sim' }, provider: 'openai', requestModel: 'm', tReq: 1000.125, chunks }
  const m = build(stats, [ex], 2000.123)
  const fractional: string[] = []
  const walk = (v: unknown, path: string): void => {
    if (typeof v === 'number') {
      if (!Number.isInteger(v)) fractional.push(`${path} = ${v}`)
    } else if (Array.isArray(v)) {
      for (const [i, x] of v.entries()) walk(x, `${path}[${i}]`)
    } else if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) if (k !== 'tokensPerSecond' && k !== 'tps') walk(x, `${path}.${k}`)
    }
  }
  walk(m, 'message')
  t.same(fractional, [])
  t.equal((m as unknown as { now: number }).now, 2_000_123, 'the clock in µs')
  t.same(m.streams[0].ticks, [100_125, 150_625], 'ticks in µs after t_req, rounded')
  t.ok(
    m.series[0].dist?.x.every((x) => x >= 1000),
    'bar edges in µs',
  )
})

t.test('a long stream first seen sends only the strip’s last 30 seconds', async (t) => {
  const marks: [number, number][] = []
  for (let at = 0; at < 60_000; at += 1000) marks.push([at, 1])
  const ex: InFlight = { id: 'long', route: { label: '/sim' }, provider: 'openai', requestModel: undefined, tReq: 0, chunks: log(marks) }
  const m = build(new LiveStats(), [ex], 60_000)
  t.equal(m.streams[0].chunks, 60)
  t.equal(m.streams[0].ticks.length, 30)
  t.equal(m.streams[0].ticks[0], 30_000_000)
})

t.test('at most MAX_STREAMS_SHOWN streams are sent and the rest counted', async (t) => {
  const active: InFlight[] = []
  for (let i = 0; i < MAX_STREAMS_SHOWN + 7; i++) active.push({ id: `s${i}`, route: { label: '/sim' }, provider: 'openai', requestModel: 'm', tReq: i, chunks: log([]) })
  const m = build(new LiveStats(), active, 100)
  t.equal(m.streams.length, MAX_STREAMS_SHOWN)
  t.equal(m.omittedStreams, 7)
  t.equal(m.system.inFlight, MAX_STREAMS_SHOWN + 7)
  t.equal(m.streams[0].id, 's0', 'oldest first')
})

t.test('recent requests keep the last N by id, with no per-gap arrays', async (t) => {
  const recent = new RecentRequests(3)
  for (const id of ['a', 'b', 'c', 'd'])
    recent.add(
      finished(
        [
          [10, 1],
          [20, 1],
        ],
        30,
        100,
        { id },
      ),
    )
  t.equal(recent.size, 3)
  t.equal(recent.get('a'), undefined, 'the oldest left')
  t.equal(recent.get('d')?.id, 'd')
  t.notOk('gaps' in (recent.get('d') as object), 'the gap runs are not kept')
  // A reused id: the later request wins, and the earlier one leaving does not remove it.
  recent.add(finished([[10, 1]], 99, 100, { id: 'b', statusCode: 201 }))
  t.equal(recent.get('b')?.statusCode, 201)
  recent.add(finished([[10, 1]], 30, 100, { id: 'e' }))
  recent.add(finished([[10, 1]], 30, 100, { id: 'f' }))
  t.equal(recent.get('b')?.statusCode, 201, 'still there after its older twin was evicted')
  t.equal(recent.size, 3)
  const none = new RecentRequests(0)
  none.add(finished([], 1, 1))
  t.equal(none.size, 0, 'capacity 0 keeps nothing')
})

t.test('a request read back from the ring has every figure it was added with, and only those', async (t) => {
  const recent = new RecentRequests(2000)
  // Distinct values in every field, so a column written in one order and read in another shows.
  const full: FinishedRequest = {
    id: 'full',
    route: '/r',
    provider: 'anthropic',
    model: 'm1',
    outcome: 'error',
    statusCode: 502,
    errorType: 'upstream_unreachable',
    ttft: 0.101,
    ttfot: 0.102,
    headers: 0.103,
    e2e: 0.104,
    tpot: 0.105,
    tps: 106,
    itlP50: 0.107,
    itlP99: 0.108,
    maxGap: 0.109,
    stalls: 110,
    outputTokens: 111,
    outputSource: 'provider',
    inputTokens: 112,
    chunks: 113,
    gaps: { count: 1, seconds: Float64Array.of(1), tokens: Float64Array.of(1), times: Float64Array.of(1) },
    lengthBand: 1,
    inputLengthBand: 2,
    concurrency: 114,
    endedAt: 115,
    upstreamReported: { queue: 0.116, load: 0.117, prompt: 0.118, generation: 0.119, total: 0.12 },
    outsideUpstream: 0.121,
    clientWriteWait: 0.122,
    slowClient: true,
  }
  const { gaps: _g, lengthBand: _b, inputLengthBand: _i, slowClient: _s, ...kept } = full
  const bare = {
    ...full,
    id: 'bare',
    ttft: undefined,
    ttfot: undefined,
    headers: undefined,
    tpot: undefined,
    tps: undefined,
    itlP50: undefined,
    itlP99: undefined,
    maxGap: undefined,
    inputTokens: undefined,
    upstreamReported: undefined,
    outsideUpstream: undefined,
    clientWriteWait: undefined,
  }
  recent.add(full)
  recent.add(bare)
  // Past the first page of rows (1,024), so a row on a later page reads back too.
  for (let i = 0; i < 1500; i++) recent.add({ ...full, id: `x${i}`, chunks: i })
  t.same(recent.get('full'), kept)
  t.strictSame(recent.get('full'), kept, 'the same values, nothing added')
  const back = recent.get('bare') as Record<string, unknown>
  for (const key of ['ttft', 'ttfot', 'headers', 'tpot', 'tps', 'itlP50', 'itlP99', 'maxGap', 'inputTokens', 'upstreamReported', 'outsideUpstream', 'clientWriteWait'])
    t.equal(back[key], undefined, `${key} stays undefined`)
  t.equal(recent.get('x1499')?.chunks, 1499)
  t.equal(recent.get('x1024')?.chunks, 1024)
  t.equal(recent.size, 1502)
})

t.test('the request view uses the log line’s names and rounding', async (t) => {
  const r = finished(
    [
      [100.0004, 1],
      [150, 1],
    ],
    1800,
    5000,
    { id: 'x' },
  )
  const v = requestView(r, 6000, Date.UTC(2026, 0, 1, 0, 0, 1))
  t.equal(v.ttft_ms, 100)
  t.equal(v.e2e_ms, 1800)
  t.equal(v.headers_ms, 10)
  t.equal(v.ended_at, '2026-01-01T00:00:00.000Z', 'ended a second before now')
  t.equal(v.input_tokens, null)
  t.equal(v.stalls, 0)
})

t.test('the longer windows are refreshed every LONG_REFRESH_SECONDS, the last minute every message', async (t) => {
  const stats = new LiveStats()
  stats.add(finished([[10, 1]], 20, 1000))
  const first = build(stats, [], 1000)
  t.equal(LONG_REFRESH_SECONDS, 5)
  t.same([first.series[0].q.e2e[3], first.series[0].q.e2e[7]], [1, 1], 'a new series is computed in full')
  stats.add(finished([[10, 1]], 20, 1500))
  const stale = build(stats, [], 2000)
  t.equal(stale.series[0].q.e2e[3], 2, 'the last minute is current')
  t.equal(stale.series[0].q.e2e[7], 1, 'the last 5 minutes wait for their second')
  t.equal(stale.series[0].ok[1], 2, 'counts are always current')
  const fresh = build(stats, [], 5000)
  t.equal(fresh.series[0].q.e2e[7], 2, 'series 0 refreshes at second 5')
  t.equal(fresh.series[0].q.e2e[11], 2)
})
