import { deserialize, serialize } from 'node:v8'
import t from 'tap'
import { ClusterMetrics, StateReporter } from '../../src/cluster/metrics.ts'
import type { WorkerMetrics } from '../../src/cluster/metrics.ts'
import { Counter } from '../../src/metrics/prometheus/counter.ts'
import { CollectedGauge } from '../../src/metrics/prometheus/gauge.ts'
import { Histogram } from '../../src/metrics/prometheus/histogram.ts'
import { GroupLabelFold } from '../../src/record/label-fold.ts'
import type { LabelCaps } from '../../src/record/label-fold.ts'
import { parseMetrics, select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'

/**
 * The cluster primary folds the workers' label values to the group's caps when it merges their
 * families (label-fold.ts): each worker bounds its own labels, the group must be bounded too.
 */

const LABELS = ['provider', 'model', 'route', 'tenant']

/** One worker's families, as LlmMetrics names them (a counter with an extra label, a histogram, the in-flight gauge, the folded counter). */
function worker() {
  const inFlight = new Map<string, number>()
  const requests = new Counter({ name: 'llm_requests_total', help: 'Requests.', labelNames: [...LABELS, 'outcome'] })
  const ttft = new Histogram({ name: 'llm_time_to_first_token_seconds', help: 'TTFT.', labelNames: LABELS, buckets: [0.1, 1], native: { schema: 3, zeroThreshold: 0, maxBuckets: 160 } })
  const gauge = new CollectedGauge({
    name: 'llm_requests_in_flight',
    help: 'In flight.',
    labelNames: LABELS,
    collect: (add) => {
      for (const [k, n] of inFlight) add(k.split('|'), n)
    },
  })
  const folded = new Counter({ name: 'llm_label_sets_folded_total', help: 'Folded.', labelNames: LABELS })
  const all = [requests, ttft, gauge, folded]
  return {
    /** A finished request of this model and tenant. */
    request(model: string, tenant = 'none'): void {
      requests.labels('openai', model, '/a', tenant, 'ok').inc()
      ttft.labels('openai', model, '/a', tenant).observe(0.5)
      gauge.touch(['openai', model, '/a', tenant])
    },
    inFlight,
    folded,
    report: (): WorkerMetrics => ({ families: deserialize(serialize(new StateReporter().report(all, undefined).families)) as WorkerMetrics['families'], process: [] }),
  }
}
type Worker = ReturnType<typeof worker>

/** A primary over `workers` (id → worker, live ones), with these caps. */
function primary(caps: LabelCaps, live: Map<number, Worker>, onFirstFold?: () => void) {
  const source = new ClusterMetrics(async () => ({ reports: [...live.values()].map((w) => w.report()), workerIds: [...live.keys()] }), { fold: new GroupLabelFold(caps, onFirstFold) })
  return {
    source,
    async scrape(): Promise<Sample[]> {
      const parts: Buffer[] = []
      for await (const batch of source.exposition(false)) parts.push(...batch)
      return parseMetrics(Buffer.concat(parts).toString('utf8'))
    },
  }
}

const values = (m: readonly Sample[], label: string): Set<string> => new Set(m.filter((s) => s.name.startsWith('llm_') && s.labels[label] !== undefined).map((s) => s.labels[label]))

const CAP = 5

t.test('models beyond the cap across workers, and across dead and replaced workers, fold into other at the primary', async (t) => {
  const live = new Map<number, Worker>([
    [1, worker()],
    [2, worker()],
  ])
  const p = primary({ maxModelsPerRoute: CAP, maxTenants: CAP, maxLabelSets: 1000 }, live)
  // Each worker admitted its own five (its own cap), ten in all.
  let n = 0
  for (const [id, w] of live)
    for (let i = 0; i < CAP; i++) {
      w.request(`w${id}-m${i}`)
      w.inFlight.set(`openai|w${id}-m${i}|/a|none`, 1)
      n++
    }
  let m = await p.scrape()
  t.equal(values(m, 'model').size, CAP + 1, 'the cap and other, over every family')
  t.equal(sumOf(m, 'llm_requests_total'), n, 'every request counted')
  t.equal(sumOf(m, 'llm_requests_total', { model: 'other' }), CAP, "the second worker's five, as other")
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { model: 'other' }), CAP, 'histograms folded with their counts')
  t.equal(sumOf(m, 'llm_requests_in_flight'), n, 'the gauge folded and summed')
  t.equal(select(m, 'llm_requests_in_flight').length, CAP + 1)

  let other = sumOf(m, 'llm_requests_total', { model: 'other' })
  for (let kill = 1; kill <= 3; kill++) {
    // A worker dies (its counts retired) and its replacement admits five names of its own.
    const dead = [...live.keys()][0]
    p.source.retire(dead)
    live.delete(dead)
    const fresh = worker()
    live.set(100 + kill, fresh)
    for (let i = 0; i < CAP; i++) {
      fresh.request(`r${kill}-m${i}`)
      n++
    }
    m = await p.scrape()
    t.equal(values(m, 'model').size, CAP + 1, `after death ${kill}: still the cap and other`)
    t.equal(sumOf(m, 'llm_requests_total'), n, `after death ${kill}: every request counted`)
    const now = sumOf(m, 'llm_requests_total', { model: 'other' })
    t.ok(now >= other, `after death ${kill}: other never goes down`)
    other = now
  }
  t.equal(sumOf(m, 'llm_label_sets_folded_total'), 0, 'value caps are no budget fold')
})

t.test('tenants beyond the cap fold at the primary; none and other never count toward it', async (t) => {
  const live = new Map<number, Worker>([
    [1, worker()],
    [2, worker()],
  ])
  const p = primary({ maxModelsPerRoute: 100, maxTenants: 2, maxLabelSets: 1000 }, live)
  const [a, b] = [...live.values()]
  a.request('m', 'none')
  a.request('m', 'other')
  a.request('m', 't1')
  b.request('m', 't2')
  b.request('m', 't3')
  const m = await p.scrape()
  t.same([...values(m, 'tenant')].sort(), ['none', 'other', 't1', 't2'])
  t.equal(sumOf(m, 'llm_requests_total', { tenant: 'other' }), 2, "the worker's other and the third tenant")
})

t.test('label sets beyond the budget fold into the overflow set at the primary, counted with what the workers folded, and warned once', async (t) => {
  const live = new Map<number, Worker>([
    [1, worker()],
    [2, worker()],
  ])
  let warnings = 0
  const p = primary({ maxModelsPerRoute: 100, maxTenants: 100, maxLabelSets: 3 }, live, () => warnings++)
  const [a, b] = [...live.values()]
  for (let i = 0; i < 3; i++) a.request('m', `a${i}`)
  let m = await p.scrape()
  t.equal(warnings, 0, 'nothing folded yet')
  for (let i = 0; i < 3; i++) {
    b.request('m', `b${i}`)
    b.request('m', `b${i}`)
  }
  // What a worker folded itself arrives as the overflow set and its own count.
  b.request('other', 'other')
  b.folded.labels('openai', 'other', '/a', 'other').inc()
  m = await p.scrape()
  t.equal(values(m, 'tenant').size, 4, 'three sets and the overflow set')
  t.equal(sumOf(m, 'llm_requests_total', { model: 'other', tenant: 'other' }), 7)
  t.same(
    select(m, 'llm_label_sets_folded_total').map((s) => [s.labels, s.value]),
    [[{ provider: 'openai', model: 'other', route: '/a', tenant: 'other' }, 7]],
    'the primary folded six requests, the worker one: one series, the overflow set',
  )
  t.equal(warnings, 1)
  m = await p.scrape()
  t.equal(sumOf(m, 'llm_label_sets_folded_total'), 7, 'the same on the next scrape')
  t.equal(warnings, 1, 'warned once')
  // The worker whose sets were folded dies: what it left is kept folded, and counted as before.
  p.source.retire(2)
  live.delete(2)
  m = await p.scrape()
  t.equal(values(m, 'tenant').size, 4, 'still three sets and the overflow set')
  t.equal(sumOf(m, 'llm_requests_total', { model: 'other', tenant: 'other' }), 7)
  t.equal(sumOf(m, 'llm_label_sets_folded_total'), 7, 'the folded count does not go down when its worker dies')
  t.equal(sumOf(m, 'llm_requests_total'), 10)
})
