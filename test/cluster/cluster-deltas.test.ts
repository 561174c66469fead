import { deserialize, serialize } from 'node:v8'
import t from 'tap'
import type { Test } from 'tap'
import { ClusterMetrics, StateReporter } from '../../src/cluster/metrics.ts'
import { HistogramCore } from '../../src/histogram/histogram-core.ts'
import { addIncrease, addState, coreFromState, coreState, observeState } from '../../src/histogram/state.ts'
import type { CoreState } from '../../src/histogram/state.ts'
import type { WorkerMetrics } from '../../src/cluster/metrics.ts'
import { requestIdExemplar } from '../../src/metrics/prometheus/histogram.ts'
import type { NativeOptions } from '../../src/metrics/prometheus/histogram.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'
import type { OwnMetric } from '../../src/metrics/prometheus/registry.ts'
import { decodeFamilies, labelsOf } from '../helpers/protobuf-metrics.ts'
import { families } from '../helpers/cluster-families.ts'
import type { Families } from '../helpers/cluster-families.ts'

/**
 * A worker's reports after its first hold only the series that changed since the report the primary
 * applied last (cluster/metrics.ts, StateReporter), and the primary adds a changed histogram part's
 * increase to the merged series: after any number of such reports the merge must stay exactly what
 * one process that observed every request serves, after a lost report, a report refused, a lowered
 * schema and a worker's death as well.
 */

const NATIVE: NativeOptions = { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 160 }

/** Dyadic values (sums exact in any order), spread over many buckets. */
const sampleValue = (i: number): number => ((i * 37) % 4099) / 1024 + (i % 7) / 65536

/** A worker: its families and its one reporter, answering with what changed since the report the primary applied last. */
class Worker {
  readonly f: Families
  readonly reporter = new StateReporter()
  constructor(
    readonly id: number,
    native: NativeOptions | undefined,
    readonly gauge = new Map<string, number>(),
  ) {
    this.f = families(native, gauge)
  }

  /** Through the same structured clone as the cluster channel. */
  report(applied: number | undefined): WorkerMetrics {
    return deserialize(serialize({ ...this.reporter.report(this.f.all, applied), process: [] })) as WorkerMetrics
  }
}

/** Records request `i` in worker `w` and in the one process. */
function record(w: Worker, one: Families, i: number): void {
  const route = i % 4 === 0 ? '/b' : '/a'
  const model = `m${i % 5}`
  for (const f of [w.f, one]) {
    f.latency.labels(route, model).observeWithExemplar(sampleValue(i), 1 + (i % 3), requestIdExemplar(`req-${i}`), 1_700_000_000 + i)
    f.requests.labels(route, i % 9 === 0 ? 'error' : 'ok').inc()
  }
}

async function read(stream: AsyncGenerator<Buffer[]>): Promise<Buffer> {
  const parts: Buffer[] = []
  for await (const batch of stream) for (const b of batch) parts.push(Buffer.from(b))
  return Buffer.concat(parts)
}

function registry(metrics: readonly OwnMetric[]): MetricsRegistry {
  const r = new MetricsRegistry({ processMetrics: false, protobuf: true })
  for (const m of metrics) r.register(m)
  return r
}

/** The exposition's sample lines (no gauge: each side has its own), sorted: series order differs between the two. */
const samples = (text: string): string[] =>
  text
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('llm_requests_in_flight'))
    .sort()

const decoded = (body: Buffer): unknown[] =>
  decodeFamilies(body)
    .filter((f) => f.name !== 'llm_requests_in_flight')
    .map((f) => ({ ...f, metric: [...f.metric].sort((x, y) => JSON.stringify(labelsOf(x)).localeCompare(JSON.stringify(labelsOf(y)))) }))

/** What the primary serves now equals what the one process serves: text with exemplars, and protobuf. */
async function same(t: Test, primary: ClusterMetrics, one: Families, what: string): Promise<void> {
  const single = registry(one.all)
  t.same(samples((await read(primary.exposition(true))).toString()), samples(await single.text(true)), `${what}: the OpenMetrics lines`)
  t.same(decoded(await read(primary.protobuf())), decoded(await read((single.protobuf as () => AsyncGenerator<Buffer[]>)())), `${what}: the protobuf series`)
}

/** The series a report carries: its families' ids (histogram states and observations skipped). */
function seriesIn(report: WorkerMetrics): Map<string, number> {
  const out = new Map<string, number>()
  for (const f of report.families) {
    let n = 0
    for (let at = f.at; at < f.end; n++) at += f.name === 'llm_time_to_first_token_seconds' ? 2 + Math.abs(f.data[at + 1]) : 2
    out.set(f.name, n)
  }
  return out
}

for (const native of [undefined, NATIVE, { schema: 8, zeroThreshold: 2 ** -128, maxBuckets: 12 }]) {
  const what = native === undefined ? 'classic buckets only' : `native buckets at schema ${native.schema}, at most ${native.maxBuckets}`
  t.test(`after many reports of only what changed, the merge is exactly one process's (${what})`, async (t) => {
    const one = families(native, new Map())
    const workers = [new Worker(1, native), new Worker(2, native)]
    const sent: WorkerMetrics[] = []
    const primary: ClusterMetrics = new ClusterMetrics(async () => {
      const reports = workers.map((w) => w.report(primary.applied(w.id)))
      sent.push(...reports)
      return { reports, workerIds: workers.map((w) => w.id) }
    })
    let i = 0
    for (let round = 0; round < 12; round++) {
      // A few requests between scrapes, on a few series: most series stay as they were.
      for (let k = 0; k < 3 + round * 7; k++) record(workers[(i * 5) % 2], one, i++)
      await same(t, primary, one, `round ${round}`)
    }
    t.equal(sent[0].base, undefined, 'the first report is whole')
    t.ok(
      sent.slice(2).every((r) => r.base !== undefined),
      'every later one adds to the one before',
    )
    workers[0].f.latency.labels('/a', 'm0').observe(0.3)
    await read(primary.exposition(false))
    const last = sent[sent.length - 2]
    t.same(Object.fromEntries(seriesIn(last)), { llm_time_to_first_token_seconds: 1 }, 'a report holds only the one series that changed (no counter, no gauge)')
    t.notOk(
      last.families.some((f) => f.def !== undefined || f.labels.length > 0),
      'no definitions and no label values once the primary has them',
    )
  })
}

t.test('a lost report: the next is whole, and nothing counts twice or goes missing', async (t) => {
  const one = families(NATIVE, new Map())
  const w = new Worker(1, NATIVE)
  let drop = false
  const sent: WorkerMetrics[] = []
  const primary: ClusterMetrics = new ClusterMetrics(async () => {
    const r = w.report(primary.applied(1))
    sent.push(r)
    if (drop) {
      // Taken by the worker, lost on the way (a timeout): the primary never applies it.
      drop = false
      return { reports: [], workerIds: [] }
    }
    return { reports: [r], workerIds: [1] }
  })
  for (let i = 0; i < 30; i++) record(w, one, i)
  await same(t, primary, one, 'before')
  for (let i = 30; i < 40; i++) record(w, one, i)
  drop = true
  const applied = primary.applied(1)
  await read(primary.exposition(false))
  t.equal(primary.applied(1), applied, 'the lost report was not applied')
  t.not(sent[sent.length - 1].base, undefined, 'it held only what changed')
  for (let i = 40; i < 45; i++) record(w, one, i)
  await same(t, primary, one, 'after the lost report')
  t.equal(sent[sent.length - 2].base, undefined, 'the worker answered the next question in full: the primary had not applied its last report')
})

t.test('a report that does not follow the one applied last is refused, and the next one, whole, is taken', async (t) => {
  const one = families(undefined, new Map())
  const w = new Worker(1, undefined)
  let answer = (): WorkerMetrics => w.report(primary.applied(1))
  const primary: ClusterMetrics = new ClusterMetrics(async () => ({ reports: [answer()], workerIds: [1] }))
  for (let i = 0; i < 10; i++) record(w, one, i)
  await same(t, primary, one, 'first')
  const stale = primary.applied(1)
  // Two reports taken against the same applied one: the second does not follow the first.
  for (let i = 10; i < 14; i++) record(w, one, i)
  const first = w.report(stale)
  const second = w.report(stale)
  t.equal(second.base, undefined, 'the reporter itself answers a stale question in full')
  answer = () => ({ ...first, base: (first.base as number) + 100 })
  await read(primary.exposition(false))
  t.equal(primary.applied(1), stale, 'a report whose base is not the one applied is not used')
  answer = () => w.report(primary.applied(1))
  await same(t, primary, one, 'then the full one')
})

t.test('a report naming a series it never described fails the scrape with a clear error; the next report, whole, repairs it', async (t) => {
  const one = families(undefined, new Map())
  const w = new Worker(1, undefined)
  let tamper = false
  const primary: ClusterMetrics = new ClusterMetrics(async () => {
    const r = w.report(primary.applied(1))
    if (!tamper) return { reports: [r], workerIds: [1] }
    tamper = false
    // The labels of the new series left out.
    return { reports: [{ ...r, families: r.families.map((f) => ({ ...f, labels: [] })) }], workerIds: [1] }
  })
  record(w, one, 0)
  await same(t, primary, one, 'first')
  record(w, one, 1)
  tamper = true
  await t.rejects(read(primary.exposition(false)), /llm_time_to_first_token_seconds: series \d+ of contributor 1 came without its labels/)
  await same(t, primary, one, 'after the repair')
})

t.test('a worker whose histogram lowers its schema between reports is merged again from every part, exactly', async (t) => {
  const narrow: NativeOptions = { schema: 8, zeroThreshold: 2 ** -128, maxBuckets: 12 }
  const one = families(narrow, new Map())
  const a = new Worker(1, narrow)
  const b = new Worker(2, narrow)
  const primary: ClusterMetrics = new ClusterMetrics(async () => ({ reports: [a.report(primary.applied(1)), b.report(primary.applied(2))], workerIds: [1, 2] }))
  for (const f of [a.f, b.f]) {
    f.latency.labels('/a', 'm').observe(1)
    one.latency.labels('/a', 'm').observe(1)
  }
  a.f.latency.labels('/a', 'm').observe(1.001)
  one.latency.labels('/a', 'm').observe(1.001)
  await same(t, primary, one, 'at schema 8')
  const before = a.f.latency.labels('/a', 'm').core.schema
  // Values far apart: past 12 buckets the worker lowers its schema.
  for (let i = 1; i < 40; i++) {
    a.f.latency.labels('/a', 'm').observe(2 ** (i / 4))
    one.latency.labels('/a', 'm').observe(2 ** (i / 4))
  }
  t.ok((a.f.latency.labels('/a', 'm').core.schema as number) < (before as number), 'the worker lowered its schema')
  await same(t, primary, one, 'after the worker lowered its schema')
})

t.test('a dead worker’s parts stay in the sums, through later reports of the others and of its replacement', async (t) => {
  const one = families(NATIVE, new Map())
  const workers = new Map([1, 2].map((id) => [id, new Worker(id, NATIVE, new Map([['/a', id]]))]))
  const primary: ClusterMetrics = new ClusterMetrics(async () => ({
    reports: [...workers.values()].map((w) => w.report(primary.applied(w.id))),
    workerIds: [...workers.keys()],
  }))
  const count = async (): Promise<{ requests: number; latency: number; inFlight: number }> => {
    const text = (await read(primary.exposition(false))).toString()
    const sum = (re: RegExp): number => [...text.matchAll(re)].reduce((n, m) => n + Number(m[1]), 0)
    return {
      requests: sum(/^llm_requests_total\{[^}]*\} (\d+)$/gm),
      latency: sum(/^llm_time_to_first_token_seconds_count\{[^}]*\} (\d+)$/gm),
      inFlight: sum(/^llm_requests_in_flight\{[^}]*\} (\d+)$/gm),
    }
  }
  let i = 0
  for (; i < 20; i++) record(workers.get(1 + (i % 2)) as Worker, one, i)
  t.same(await count(), { requests: 20, latency: 39, inFlight: 3 }, 'both workers, and their requests in flight')
  for (; i < 30; i++) record(workers.get(1 + (i % 2)) as Worker, one, i)
  await count()
  // Worker 1 dies: what it reported stays; what it recorded after its last report is lost with it.
  for (; i < 34; i++) record(workers.get(1) as Worker, families(NATIVE, new Map()), i)
  primary.retire(1)
  workers.delete(1)
  workers.set(3, new Worker(3, NATIVE, new Map([['/a', 5]])))
  const after = await count()
  t.same(after, { requests: 30, latency: 60, inFlight: 7 }, 'its counters and histograms stay, its gauge goes')
  for (; i < 60; i++) record(workers.get(i % 2 === 0 ? 2 : 3) as Worker, one, i)
  await same(t, primary, one, 'the dead worker’s parts beside the live ones’ later reports')
  primary.retire(2)
  workers.delete(2)
  primary.retire(3)
  workers.delete(3)
  await same(t, primary, one, 'two more dead: their parts added to the dead workers’ part')
})

t.test('a collected gauge sends only the label sets whose count changed, a count back at 0 included', async (t) => {
  const w = new Worker(
    1,
    undefined,
    new Map([
      ['/a', 2],
      ['/b', 1],
    ]),
  )
  const primary: ClusterMetrics = new ClusterMetrics(async () => ({ reports: [w.report(primary.applied(1))], workerIds: [1] }))
  const inFlight = async (): Promise<string[]> =>
    (await read(primary.exposition(false)))
      .toString()
      .split('\n')
      .filter((l) => l.startsWith('llm_requests_in_flight{'))
  t.same(await inFlight(), ['llm_requests_in_flight{route="/a"} 2', 'llm_requests_in_flight{route="/b"} 1'])
  w.gauge.delete('/b')
  w.gauge.set('/c', 4)
  const r = w.report(primary.applied(1))
  const gauge = r.families.find((f) => f.name === 'llm_requests_in_flight')
  t.equal(gauge === undefined ? 0 : (gauge.end - gauge.at) / 2, 2, '/b back at 0 and the new /c; /a unchanged is not sent')
  t.equal(r.families.length, 1, 'nor are the families with no change')
})

t.test('a report whose histogram state runs past its family fails the scrape clearly; a family never described refuses the report', async (t) => {
  const one = families(NATIVE, new Map())
  const w = new Worker(1, NATIVE)
  let tamper: ((r: WorkerMetrics) => WorkerMetrics) | undefined
  const primary: ClusterMetrics = new ClusterMetrics(async () => {
    const r = w.report(primary.applied(1))
    const out = tamper === undefined ? r : tamper(r)
    tamper = undefined
    return { reports: [out], workerIds: [1] }
  })
  record(w, one, 0)
  // The first report without its definitions: the primary cannot read it, and asks again in full.
  tamper = (r) => ({ ...r, families: r.families.map(({ def: _def, ...f }) => f) })
  await read(primary.exposition(false))
  t.equal(primary.applied(1), undefined, 'not applied')
  await same(t, primary, one, 'the next, whole, is')
  record(w, one, 1)
  tamper = (r) => {
    const data = Float64Array.from(r.families[0].data)
    data[r.families[0].at + 1] = 1e6
    return { ...r, families: r.families.map((f) => ({ ...f, data })) }
  }
  await t.rejects(read(primary.exposition(false)), /llm_time_to_first_token_seconds: series \d+ of contributor 1 has a state of 1000000 figures/)
  await same(t, primary, one, 'after the repair')
})

t.test('a second reporter over the same families takes their changes over: the first one’s next report sends them all', async (t) => {
  const w = new Worker(1, undefined)
  for (let i = 0; i < 8; i++) w.f.requests.labels(`/r${i}`, 'ok').inc()
  const first = w.reporter.report(w.f.all, undefined)
  const other = new StateReporter()
  other.report(w.f.all, undefined)
  w.f.requests.labels('/r0', 'ok').inc()
  const again = w.reporter.report(w.f.all, first.seq)
  t.not(again.base, undefined, 'a report that adds to the one before')
  const requests = again.families.find((f) => f.name === 'llm_requests_total')
  t.equal(requests === undefined ? 0 : (requests.end - requests.at) / 2, 8, 'with every series of the family another reporter read last')
})

t.test('a family another reporter numbered since is sent whole and replaces the parts the primary had: nothing counts twice', async (t) => {
  const one = families(NATIVE, new Map())
  const w = new Worker(1, NATIVE, new Map([['/a', 2]]))
  const sent: WorkerMetrics[] = []
  // From the counter family sent whole on, its first `n` ids are numbered backwards on the way: they no longer match the
  // parts the primary had for them.
  let n = 0
  const backwards = (r: WorkerMetrics): WorkerMetrics => ({
    ...r,
    families: r.families.map((f) => {
      if (f.name !== 'llm_requests_total' || (f.whole !== true && n === 0)) return f
      let labels = f.labels
      if (f.whole === true) {
        n = (f.end - f.at) / 2
        const reversed: string[] = []
        for (let k = n - 1; k >= 0; k--) reversed.push(...f.labels.slice(2 * k, 2 * k + 2))
        labels = reversed
      }
      const data = Float64Array.from(f.data)
      for (let at = f.at; at < f.end; at += 2) if (data[at] < n) data[at] = n - 1 - data[at]
      return { ...f, data, labels }
    }),
  })
  const primary: ClusterMetrics = new ClusterMetrics(async () => {
    sent.push(w.report(primary.applied(1)))
    return { reports: [backwards(sent[sent.length - 1])], workerIds: [1] }
  })
  for (let i = 0; i < 20; i++) record(w, one, i)
  await same(t, primary, one, 'before')
  for (let i = 20; i < 26; i++) record(w, one, i)
  new StateReporter().report(w.f.all, undefined)
  for (let i = 26; i < 30; i++) record(w, one, i)
  await same(t, primary, one, 'after the other reader')
  const taken = sent[sent.length - 2]
  t.not(taken.base, undefined, 'a report that adds to the one before')
  t.same(
    taken.families.map((f) => [f.name, f.whole === true, f.first, f.labels.length > 0]),
    w.f.all.map((m) => [m.name, true, 0, true]),
    'every family whole, numbered from 0 with its labels',
  )
  for (let i = 30; i < 40; i++) record(w, one, i)
  await same(t, primary, one, 'and the report after')
  t.notOk(
    sent[sent.length - 2].families.some((f) => f.whole === true),
    'then only what changed again',
  )
})

t.test('an increase is added only between two states of one schema where no count fell; else false, and every part is merged again', async (t) => {
  const bounds = Float64Array.from([0.1, 1])
  const core = (schema: number | undefined, values: readonly number[]): HistogramCore => {
    const c = new HistogramCore({ schema, maxBuckets: 0, bounds })
    for (const v of values) c.observe(v)
    return c
  }
  const spread = Array.from({ length: 60 }, (_, i) => 2 ** (i / 8))
  const prev = coreState(core(3, [0.5, 2]))
  const cases: [string, CoreState, boolean][] = [
    ['no change', prev, true],
    ['more in a bucket and a new one, a state longer than any before', coreState(core(3, [0.5, 2, 2, ...spread])), true],
    ['another schema', coreState(core(2, [0.5, 2, 2])), false],
    ['classic buckets only', coreState(core(undefined, [0.5, 2, 2])), false],
    ['a classic count fell', coreState(core(3, [2, 2])), false],
    ['a bucket gone, the next one above it', coreState(core(3, [0.6, 2, 2])), false],
    ['a bucket gone, none above it', coreState(core(3, [0.5, 1.5])), false],
  ]
  for (const [what, next, ok] of cases) {
    const merged = core(3, [])
    addState(merged, prev)
    t.equal(addIncrease(merged, prev, prev.length, next), ok, what)
    if (ok) t.same([...coreState(merged)], [...coreState(coreFromState(next, bounds))], `${what}: the merged core holds the new state`)
  }
  const fewer = Float64Array.from(prev)
  fewer[3] -= 1
  t.notOk(addIncrease(core(3, []), prev, prev.length, fewer), 'a count that fell')
  const lessInBucket = Float64Array.from(coreState(core(3, [0.5, 2])))
  lessInBucket[lessInBucket.length - 1] = 0.5
  t.notOk(addIncrease(core(3, []), prev, prev.length, lessInBucket), 'a bucket whose count fell')
  const wide = Float64Array.from([0.05, 1.5, 0.5, 0.5, 2])
  const three = new HistogramCore({ schema: 3, maxBuckets: 0, bounds: Float64Array.from([0.1, 1, 2]) })
  for (const v of wide) three.observe(v)
  const before = coreState(three)
  const middle = Float64Array.from(before)
  middle[11] -= 1
  middle[3] += 1
  t.notOk(addIncrease(core(3, []), before, before.length, middle), 'a classic count between two others that fell')
})

t.test('a state sends the classic counts from the first slot that is not 0 to the last, and reads back whole', async (t) => {
  const bounds = Float64Array.from([0.01, 0.1, 1, 10, 100])
  const c = new HistogramCore({ schema: 3, maxBuckets: 0, bounds })
  const empty = coreState(c)
  for (const v of [0.5, 0.7, 50]) c.observe(v)
  const state = coreState(c)
  t.same([...state.subarray(8, 13)], [3, 2, 2, 0, 1], 'three counts sent, slots 2 to 4 (the one between at 0)')
  t.same([...coreState(coreFromState(state, bounds))], [...state], 'the same state again from the core it fills')
  t.same([...(coreFromState(state, bounds).classic ?? [])], [0, 0, 2, 0, 1, 0], 'every slot in its place')
  t.same([...empty.subarray(8, 10)], [0, 0], 'no observation: no count sent')
  const merged = new HistogramCore({ schema: 3, maxBuckets: 0, bounds })
  t.ok(addIncrease(merged, empty, empty.length, state), 'from nothing to three observations')
  t.same([...(merged.classic ?? [])], [0, 0, 2, 0, 1, 0], 'the increase in the slots it fell in')
})

t.test('observations added to a kept state give exactly the state of the core that observed them, and add to the merge what its increase would', async (t) => {
  const bounds = Float64Array.from([0.01, 0.1, 1, 10, 100])
  // Each run starts from a core holding `from` and observes `then` (value, weight pairs): new buckets below, between and
  // above those held, classic slots below and above the counts sent, the zero bucket, a negative value, +Inf.
  const cases: [string, number | undefined, number[], number[]][] = [
    ['into buckets held', 3, [0.5, 0.7], [0.5, 1, 0.7, 2]],
    ['a new bucket below, between and above, a classic slot below and above', 3, [0.5, 50], [0.002, 1, 5, 3, 500, 1, 0.3, 1]],
    ['from an empty core', 3, [], [0.5, 1, 0.05, 2]],
    ['the zero bucket, a negative value, past the last bound', 3, [2], [0, 1, -1, 1, 1e6, 3]],
    ['classic buckets only', undefined, [0.5], [0.002, 1, 500, 2]],
    ['many new buckets: the state moves to a larger room', 3, [1], Array.from({ length: 40 }, (_, i) => [2 ** (i / 3 - 6), 1]).flat()],
  ]
  for (const [what, schema, from, then] of cases) {
    const worker = new HistogramCore({ schema, maxBuckets: 0, bounds })
    for (const v of from) worker.observe(v)
    const kept = coreState(worker)
    const merged = coreFromState(kept, bounds)
    const room = { state: Float64Array.from(kept), length: kept.length }
    for (let i = 0; i < then.length; i += 2) worker.observe(then[i], then[i + 1])
    observeState(room, Float64Array.from(then), 0, then.length, bounds, merged)
    const now = coreState(worker)
    t.same([...(room.state as Float64Array).subarray(0, room.length)], [...now], `${what}: the kept state is the core's`)
    t.same([...coreState(merged)], [...now], `${what}: the merge grew by what the core did`)
    const dirty = { state: Float64Array.from(kept), length: kept.length }
    observeState(dirty, Float64Array.from(then), 0, then.length, bounds, undefined)
    t.same([...(dirty.state as Float64Array).subarray(0, dirty.length)], [...now], `${what}: without a merge to add to, the same state`)
  }
  const none = new HistogramCore({ schema: 3, maxBuckets: 0 })
  none.observe(0.5)
  const room = { state: coreState(none), length: coreState(none).length }
  none.observe(4, 2)
  observeState(room, Float64Array.from([4, 2]), 0, 2, undefined, undefined)
  t.same([...(room.state as Float64Array).subarray(0, room.length)], [...coreState(none)], 'a family with no classic buckets')
})

t.test('a series observed once or twice since its last report sends those observations, one observed more or whose schema was lowered sends its state, and the merge stays exact', async (t) => {
  // At schema 3 and 12 buckets at most, the values below stay in 12 buckets until the far apart ones.
  const narrow: NativeOptions = { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 12 }
  const one = families(narrow, new Map())
  const w = new Worker(1, narrow)
  const sent: WorkerMetrics[] = []
  const primary: ClusterMetrics = new ClusterMetrics(async () => {
    sent.push(w.report(primary.applied(1)))
    return { reports: [sent[sent.length - 1]], workerIds: [1] }
  })
  const observe = (model: string, ...values: number[]): void => {
    for (const v of values) for (const f of [w.f, one]) f.latency.labels('/a', model).observe(v)
  }
  /** Each TTFT series of the report before the last (`same` scrapes twice): its state's length, or minus its observations' figures. */
  const sizes = (): number[] => {
    const f = sent[sent.length - 2].families.find((x) => x.name === 'llm_time_to_first_token_seconds')
    const out: number[] = []
    for (let at = f?.at ?? 0; at < (f?.end ?? 0); at += 2 + Math.abs((f as { data: Float64Array }).data[at + 1])) out.push((f as { data: Float64Array }).data[at + 1])
    return out
  }
  observe('once', 0.3)
  observe('twice', 0.3)
  observe('thrice', 0.3)
  await same(t, primary, one, 'first')
  t.ok(
    sizes().every((n) => n > 0),
    'a series new to the primary sends its state',
  )
  observe('once', 0.4)
  observe('twice', 0.01, 7)
  observe('thrice', 0.3, 0.5, 0.9)
  await same(t, primary, one, 'after one, two and three observations')
  const [once, twice, thrice] = sizes()
  t.same([once, twice], [-2, -4], 'one and two observations go as value, weight pairs')
  t.ok(thrice > 0, 'three go as the state')
  // Far apart values: their range is too wide for 12 buckets at schema 3, so the worker lowers its schema.
  observe('once', 0.5)
  observe('twice', 2 ** 20, 2 ** -20)
  await same(t, primary, one, 'after a lowered schema')
  t.ok(sizes()[1] > 0, 'a series whose schema was lowered since its last report sends its state')
  observe('twice', 2 ** 20)
  await same(t, primary, one, 'and after that, its observations again')
  t.equal(sizes()[0], -2, 'at its new schema')
})

t.test('observations for a series whose state the primary does not hold fail the scrape clearly; the next report, whole, repairs it', async (t) => {
  const one = families(NATIVE, new Map())
  const w = new Worker(1, NATIVE)
  let tamper = false
  const primary: ClusterMetrics = new ClusterMetrics(async () => {
    const r = w.report(primary.applied(1))
    if (!tamper) return { reports: [r], workerIds: [1] }
    tamper = false
    // The first series' state sent as two figures of observations: the primary has no state to add them to.
    const data = Float64Array.from(r.families[0].data)
    data[r.families[0].at + 1] = -2
    return { reports: [{ ...r, families: r.families.map((f) => ({ ...f, data })) }], workerIds: [1] }
  })
  tamper = true
  record(w, one, 0)
  await t.rejects(read(primary.exposition(false)), /llm_time_to_first_token_seconds: series 0 of contributor 1 sent observations before its state/)
  await same(t, primary, one, 'after the repair')
})
