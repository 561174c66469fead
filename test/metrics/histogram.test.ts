import t from 'tap'
import { Histogram } from '../../src/metrics/prometheus/histogram.ts'
import { Counter } from '../../src/metrics/prometheus/counter.ts'
import { CollectedGauge } from '../../src/metrics/prometheus/gauge.ts'
import { parseMetrics, sumOf } from '../helpers/prometheus.ts'
/** A family's whole exposition as text. */
const exposition = (m: { chunks(openMetrics?: boolean): Iterable<Buffer> }, openMetrics = false): string => Buffer.concat([...m.chunks(openMetrics)]).toString('utf8')

t.test('a weighted observation counts k observations of one value, le inclusive', async (t) => {
  const h = new Histogram({ name: 'x_seconds', help: 'x', labelNames: ['a'], buckets: [0.01, 0.1, 1] })
  const s = h.labels('one')
  s.observe(0.01, 4) // exactly on a bound: le is inclusive
  s.observe(0.05)
  s.observe(5)
  s.observe(0.2, 0) // weight 0 is no observation
  s.observe(Number.NaN)
  const m = parseMetrics(exposition(h))
  t.same(
    m.filter((x) => x.name === 'x_seconds_bucket').map((x) => [x.labels.le, x.value]),
    [
      ['0.01', 4],
      ['0.1', 5],
      ['1', 5],
      ['+Inf', 6],
    ],
  )
  t.equal(sumOf(m, 'x_seconds_count'), 6)
  t.ok(Math.abs(sumOf(m, 'x_seconds_sum') - (0.04 + 0.05 + 5)) < 1e-12)
  t.equal(h.labels('one'), s, 'a label set is bound once')
})

t.test('label values are escaped in the text format', async (t) => {
  const c = new Counter({ name: 'y_total', help: 'line one\nline "two" \\', labelNames: ['model'] })
  c.labels('we"ird\\name\nx').inc(2)
  const text = exposition(c)
  t.match(text, /# HELP y_total line one\\nline "two" \\\\/)
  t.match(text, /y_total\{model="we\\"ird\\\\name\\nx"\} 2/)
  t.same(parseMetrics(text)[0].labels, { model: 'we"ird\\name\nx' })
  t.match(exposition(c, true), /# TYPE y counter\ny_total/, 'OpenMetrics names the family without _total')
  t.throws(() => new Counter({ name: 'bad', help: '', labelNames: [] }))
})

t.test('histograms and counters expose prom-client JSON for the cluster aggregator', async (t) => {
  const h = new Histogram({ name: 'z_seconds', help: 'z', labelNames: ['a'], buckets: [1, 2] })
  h.labels('v').observe(1.5, 2)
  const json = h.get()
  t.equal(json.aggregator, 'sum')
  t.same(
    json.values.map((v) => [v.metricName, v.labels.le, v.value]),
    [
      ['z_seconds_bucket', 1, 0],
      ['z_seconds_bucket', 2, 2],
      ['z_seconds_bucket', '+Inf', 2],
      ['z_seconds_sum', undefined, 3],
      ['z_seconds_count', undefined, 2],
    ],
  )
})

t.test('a collected gauge counts at scrape time and keeps seen label sets at 0', async (t) => {
  let live: string[][] = [['p', 'm', 'r']]
  const g = new CollectedGauge({
    name: 'g',
    help: 'g',
    labelNames: ['provider', 'model', 'route'],
    collect: (add) => {
      for (const l of live) add(l, 1)
    },
  })
  t.equal(sumOf(parseMetrics(exposition(g)), 'g'), 1)
  live = []
  g.touch(['p', 'm2', 'r'])
  const m = parseMetrics(exposition(g))
  t.same(
    m.map((x) => [x.labels.model, x.value]),
    [
      ['m', 0],
      ['m2', 0],
    ],
  )
})
