import { deserialize, serialize } from 'node:v8'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { ClusterViews, mergeStreams, WorkerViews } from '../../src/cluster/views.ts'
import type { InFlightDelta, LiveBatch } from '../../src/cluster/views.ts'
import { buildMessage } from '../../src/admin/live/live-message.ts'
import { fromObservations } from '../../src/admin/live/finished-request.ts'
import type { FinishedRequest } from '../../src/admin/live/finished-request.ts'
import { LiveStore } from '../../src/admin/live/live-store.ts'
import type { Exchange } from '../../src/proxy/exchange.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { observationsOf } from '../helpers/observe.ts'

/**
 * The cluster primary's live views (cluster/views.ts): its LiveStore is fed by the workers'
 * batches and must give the live page what one process that had served every request gives;
 * the streams in flight are mirrored chunk by chunk. Each process has its own monotonic clock:
 * here the primary started 10 minutes before the workers, so their times are 600,000 ms later on
 * its clock (past the page's 1-minute window: a time not moved would show in the wrong windows).
 * Batches cross the same structured clone as the cluster channel (v8 serialize).
 */

const SHIFT_MS = 600_000
const clone = <T>(x: T): T => deserialize(serialize(x)) as T

function log(marks: readonly [number, number][]): ChunkLog {
  const l = new ChunkLog()
  for (const [at, k] of marks) l.add(at, k, MarkKind.text, false)
  return l
}

/** A finished request: t_req 0, `n` chunks `gap` ms apart from 100 ms, ended at `endedAt` (worker clock). */
function finished(id: string, model: string, n: number, gap: number, endedAt: number): FinishedRequest {
  const marks = Array.from({ length: n }, (_, i) => [100 + i * gap + (i % 3), 1 + (i % 2)] as [number, number])
  const m = measure({ tReq: 0, tEnd: 100 + n * gap, tHeaders: 10, statusCode: 200, failure: undefined, clientGone: false, chunks: log(marks), summary: {}, stallSeconds: 1 })
  return { ...fromObservations(observationsOf(m, { id, provider: 'openai', model, route: '/sim' })), endedAt }
}

t.test("the primary's live message from two workers' batches is the one a single process gives for the same requests", async (t) => {
  const batches: LiveBatch[] = []
  const workers = [new WorkerViews((b) => batches.push(clone(b))), new WorkerViews((b) => batches.push(clone(b)))]
  const primary = new ClusterViews({ stallSeconds: 1, origin: performance.timeOrigin - SHIFT_MS })
  const one = new LiveStore({ recentRequests: 0, stallSeconds: 1 })
  for (let i = 0; i < 60; i++) {
    const r = finished(`r${i}`, i % 3 === 0 ? 'm1' : 'm2', 5 + (i % 7), 20 + (i % 5) * 10, 1000 + i * 250)
    workers[i % 2].finished(r)
    one.add({ ...r, endedAt: r.endedAt + SHIFT_MS })
  }
  for (const w of workers) w.flush()
  t.equal(batches.length, 2, 'one batch a worker')
  batches.forEach((b, i) => {
    primary.onMessage(b, i + 1)
  })
  const now = 1000 + 60 * 250 + SHIFT_MS
  const fromWorkers = buildMessage(primary.live.stats, primary.active, now, new Map(), 1, 0)
  const single = buildMessage(one.stats, new Set(), now, new Map(), 1)
  t.same(fromWorkers, single, 'the same message, figure for figure')
  t.equal((single.system as { ok: number[] }).ok[0], 60, 'every request counted')
})

t.test('the streams in flight are mirrored chunk by chunk, on the primary’s clock, and leave when they end', async (t) => {
  const views = new WorkerViews(() => {})
  const primary = new ClusterViews({ stallSeconds: 1, origin: performance.timeOrigin - SHIFT_MS })
  const chunks = log([
    [100, 1],
    [140, 2],
  ])
  const ex = { id: 'x1', route: { label: '/sim' }, provider: 'openai', requestModel: 'm', tReq: 50, chunks } as unknown as Exchange
  const active = new Set<Exchange>([ex])
  primary.onInFlight(clone(views.inFlight(active, [])) as InFlightDelta, 1)
  chunks.add(200, 1, MarkKind.text, false)
  chunks.add(260, 3, MarkKind.text, false)
  const delta = views.inFlight(active, [{ id: 's1', route: { label: '/rt' }, provider: 'openai', model: 'gpt-realtime', tReq: 10, responsesInFlight: 1 }])
  t.equal(delta.streams[0].at.length, 2, 'the second sync sends only the two new chunks')
  primary.onInFlight(clone(delta), 1)
  t.equal(primary.active.size, 1, 'one stream mirrored')
  t.equal(primary.inFlight, 1, 'one in flight')
  const [mirror] = primary.active
  t.equal(mirror.tReq, 50 + SHIFT_MS, 't_req on the primary’s clock')
  t.same(
    Array.from({ length: mirror.chunks.count }, (_, i) => [mirror.chunks.at(i), mirror.chunks.tokens(i)]),
    [
      [100 + SHIFT_MS, 1],
      [140 + SHIFT_MS, 2],
      [200 + SHIFT_MS, 1],
      [260 + SHIFT_MS, 3],
    ],
    'every chunk, once',
  )
  t.match(primary.live.realtime.message(300 + SHIFT_MS), { open: 1, sessions: [{ id: 's1' }] }, 'the open realtime session is mirrored too')
  active.delete(ex)
  primary.onInFlight(clone(views.inFlight(active, [])), 1)
  t.equal(primary.active.size, 0, 'an ended stream leaves the mirror')
  active.add(ex)
  primary.onInFlight(clone(views.inFlight(active, [])), 2)
  primary.workerGone(2)
  t.equal(primary.active.size, 0, 'a dead worker’s streams leave with it')
  t.equal(primary.inFlight, 0, 'and its count')
  primary.onInFlight(clone(views.inFlight(active, [{ id: 's2', route: { label: '/rt' }, provider: 'openai', model: undefined, tReq: 10, responsesInFlight: 0 }])), 3)
  primary.clearInFlight()
  t.equal(primary.active.size + primary.inFlight, 0, 'no live page open: the mirror is emptied, not left stale')
  t.match(primary.live.realtime.message(300 + SHIFT_MS), { open: 0 }, 'its sessions too')
})

t.test('the workers’ /debug/streams merge oldest first, bounded', async (t) => {
  const stream = (id: string, age: number) => ({
    request_id: id,
    route: '/sim',
    provider: 'openai',
    model: null,
    method: 'POST',
    status: 200,
    age_ms: age,
    headers_ms: 1,
    ttft_ms: 2,
    chunks: 1,
    tokens: 1,
    gap_ms: 0,
  })
  const merged = mergeStreams(
    [
      { in_flight: 3, shown: 2, omitted: 1, streams: [stream('a', 500), stream('b', 100)] },
      { in_flight: 1, shown: 1, omitted: 0, streams: [stream('c', 300)] },
    ],
    2,
  )
  t.same(
    merged.streams.map((s) => s.request_id),
    ['a', 'c'],
    'the oldest of all workers first',
  )
  t.match(merged, { in_flight: 4, shown: 2, omitted: 2 }, 'every worker’s streams counted')
})
