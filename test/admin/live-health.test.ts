import { hostname } from 'node:os'
import { readFileSync } from 'node:fs'
import t from 'tap'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { fromObservations } from '../../src/admin/live/finished-request.ts'
import type { FinishedRequest } from '../../src/admin/live/finished-request.ts'
import { LiveStats } from '../../src/admin/live/live-stats.ts'
import { buildMessage } from '../../src/admin/live/live-message.ts'
import { ProcessFigures } from '../../src/admin/live/process-figures.ts'
import { observationsOf } from '../helpers/observe.ts'
import { repoPath } from '../helpers/paths.ts'

/**
 * What the live message tells an SRE first: failures by status and the newest failed requests
 * (with their ids), goodput per route with an SLO, the time to response headers, and the
 * process's own figures.
 */

/** A request of three chunks, headers at 40 ms, ended at `endedAt` (ms). */
function finished(endedAt: number, over: Partial<FinishedRequest> = {}): FinishedRequest {
  const chunks = new ChunkLog()
  for (const at of [100, 150, 200]) chunks.add(at, 1, MarkKind.text, false)
  const m = measure({ tReq: 0, tEnd: 250, tHeaders: 40, statusCode: 200, failure: undefined, clientGone: false, chunks, summary: {}, stallSeconds: 1 })
  return { ...fromObservations(observationsOf(m, { id: 'r', provider: 'openai', model: 'm', route: '/sim' })), endedAt, ...over }
}

type Msg = {
  system: { errorsByStatus: { status: number; n: number[] }[]; errorsByType: { type: string; n: number[] }[] }
  slo: { route: string; met: number[]; missed: number[] }[]
  failures: { id: string; route: string; model: string; status: number; ago: number }[]
  series: { q: Record<string, (number | null)[]> }[]
}
const build = (stats: LiveStats, now: number): Msg => buildMessage(stats, new Set(), now, new Map(), 1) as unknown as Msg

t.test('errors are counted by the status they got, most frequent first, over each window', async (t) => {
  const stats = new LiveStats()
  stats.add(finished(1000))
  stats.add(finished(2000, { id: 'a', outcome: 'error', statusCode: 503 }))
  stats.add(finished(3000, { id: 'b', outcome: 'error', statusCode: 401 }))
  stats.add(finished(4000, { id: 'c', outcome: 'error', statusCode: 503 }))
  // An error event inside a 200 stream.
  stats.add(finished(5000, { id: 'd', outcome: 'error', statusCode: 200 }))
  stats.add(finished(6000, { id: 'e', outcome: 'cancelled', statusCode: 200 }))
  const m = build(stats, 10_000)
  t.same(m.system.errorsByStatus, [
    { status: 503, n: [2, 2, 2] },
    { status: 200, n: [1, 1, 1] },
    { status: 401, n: [1, 1, 1] },
  ])
  // Two minutes later the errors have left the last minute but not the 5- and 15-minute windows.
  t.same(build(stats, 130_000).system.errorsByStatus[0], { status: 503, n: [0, 2, 2] })
})

t.test('requests that were not ok are counted by who is to blame (error_type), most frequent first, cancelled ones included', async (t) => {
  const stats = new LiveStats()
  stats.add(finished(1000))
  stats.add(finished(2000, { outcome: 'error', statusCode: 429, errorType: 'upstream_rate_limited' }))
  stats.add(finished(3000, { outcome: 'error', statusCode: 429, errorType: 'policy' }))
  stats.add(finished(4000, { outcome: 'error', statusCode: 529, errorType: 'upstream_rate_limited' }))
  stats.add(finished(5000, { outcome: 'cancelled', statusCode: 200, errorType: 'client_cancelled' }))
  t.same(build(stats, 10_000).system.errorsByType, [
    { type: 'upstream_rate_limited', n: [2, 2, 2] },
    { type: 'client_cancelled', n: [1, 1, 1] },
    { type: 'policy', n: [1, 1, 1] },
  ])
  t.same(build(stats, 130_000).system.errorsByType[0], { type: 'upstream_rate_limited', n: [0, 2, 2] }, 'out of the last minute, still in the longer windows')
  t.same(build(stats, 20 * 60_000).system.errorsByType, [], 'none left in any window')
})

t.test('the newest failed requests are listed with their ids, status and age, at most ten', async (t) => {
  const stats = new LiveStats()
  for (let i = 0; i < 12; i++) stats.add(finished(1000 * i, { id: `req-${i}`, outcome: 'error', statusCode: 500 + (i % 3), errorType: 'upstream_error' }))
  stats.add(finished(20_000, { id: 'fine' }))
  const m = build(stats, 21_000)
  t.same(
    m.failures.map((f) => f.id),
    Array.from({ length: 10 }, (_, i) => `req-${i + 2}`),
    'the ten newest failures, oldest first; a success is not one',
  )
  t.same(m.failures[9], { id: 'req-11', route: '/sim', model: 'm', status: 502, errorType: 'upstream_error', ago: 10_000_000 }, 'its age in µs')
})

t.test('a route with an SLO sends its met and missed counts (goodput); a route without sends none', async (t) => {
  const stats = new LiveStats()
  for (let i = 0; i < 3; i++) stats.add(finished(1000 + i, { route: '/judged', slo: 'met' }))
  stats.add(finished(2000, { route: '/judged', slo: 'missed' }))
  stats.add(finished(2000, { route: '/plain' }))
  t.same(build(stats, 3000).slo, [{ route: '/judged', met: [3, 3, 3], missed: [1, 1, 1] }])
})

t.test('the time to response headers has its window quantiles beside TTFT', async (t) => {
  const stats = new LiveStats()
  stats.add(finished(1000))
  const q = build(stats, 2000).series[0].q
  const p50 = q.headers[0] as number
  // 40 ms, read from a sketch within 0.55 %.
  t.ok(Math.abs(p50 - 40_000) <= 40_000 * 0.0055, `p50 ${p50} µs`)
  t.equal(q.headers[3], 1, 'one request')
  t.ok((q.ttft[0] as number) > p50, 'the first token comes after the headers')
})

t.test('the process figures name the instance and version and give CPU and memory', async (t) => {
  const figures = new ProcessFigures()
  const before = figures.read()
  t.equal(before.instance, hostname())
  t.equal(before.pid, process.pid)
  t.equal(before.version, (JSON.parse(readFileSync(repoPath('package.json'), 'utf8')) as { version: string }).version)
  t.equal(before.node, process.versions.node)
  t.equal(before.loopP99, null, 'no event-loop figures before the histogram runs')
  // Some CPU between two reads.
  let x = 0
  for (let i = 0; i < 2e6; i++) x += i
  t.ok(x > 0)
  const after = figures.read()
  t.ok(after.cpu !== null && after.cpu > 0, `cpu ${after.cpu} per 10,000 of a core`)
  t.ok(after.rss > after.heapUsed && after.heapUsed > 0)
  figures.start()
  figures.stop()
})
