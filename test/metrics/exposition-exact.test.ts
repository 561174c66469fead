import fc from 'fast-check'
import t from 'tap'
import { Counter } from '../../src/metrics/prometheus/counter.ts'
import { CollectedGauge } from '../../src/metrics/prometheus/gauge.ts'
import { Histogram, requestIdExemplar } from '../../src/metrics/prometheus/histogram.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'

/**
 * The scrape's bytes against a serializer written here from the formats alone, straightforward
 * string building over a model of the same state: the families render from cached label bytes,
 * counts written as digits and series bytes rewritten in place, and none of that may change one
 * byte of what a scraper reads.
 * Text format: https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
 * OpenMetrics: https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md
 */

// ---------------------------------------------------------------- the model and its serializer

interface ModelExemplar {
  readonly labels: string
  readonly value: number
  readonly timestamp: number
}

interface ModelHistogram {
  readonly kind: 'histogram'
  readonly name: string
  readonly help: string
  readonly labelNames: string[]
  /** Finite, distinct, ascending. */
  readonly bounds: number[]
  /** By label values joined with NUL, in first-use order. */
  readonly series: Map<string, { values: string[]; counts: number[]; sum: number; count: number; exemplars: (ModelExemplar | undefined)[] }>
}

interface ModelCounter {
  readonly kind: 'counter'
  readonly name: string
  readonly help: string
  readonly labelNames: string[]
  readonly series: Map<string, { values: string[]; value: number }>
}

interface ModelGauge {
  readonly kind: 'gauge'
  readonly name: string
  readonly help: string
  readonly labelNames: string[]
  /** What collect() adds at a scrape, per label set in first-seen order. */
  readonly series: Map<string, { values: string[]; value: number }>
}

type ModelFamily = ModelHistogram | ModelCounter | ModelGauge

function escapeValue(v: string): string {
  let out = ''
  for (const ch of v) out += ch === '\\' ? '\\\\' : ch === '"' ? '\\"' : ch === '\n' ? '\\n' : ch
  return out
}

function escapeHelp(v: string, openMetrics: boolean): string {
  let out = ''
  for (const ch of v) out += ch === '\\' ? '\\\\' : ch === '\n' ? '\\n' : ch === '"' && openMetrics ? '\\"' : ch
  return out
}

/** Numbers as both formats write floats: Go's ParseFloat reads these. */
function float(v: number): string {
  if (Number.isNaN(v)) return 'NaN'
  if (v === Number.POSITIVE_INFINITY) return '+Inf'
  if (v === Number.NEGATIVE_INFINITY) return '-Inf'
  return String(v)
}

function labelText(names: readonly string[], values: readonly string[], extra?: string): string {
  const parts = names.map((n, i) => `${n}="${escapeValue(values[i])}"`)
  if (extra !== undefined) parts.push(extra)
  return parts.length === 0 ? '' : `{${parts.join(',')}}`
}

function serialize(families: readonly ModelFamily[], openMetrics: boolean): string {
  const out: string[] = []
  for (const f of families) {
    const family = openMetrics && f.kind === 'counter' ? f.name.replace(/_total$/, '') : f.name
    out.push(`# HELP ${family} ${escapeHelp(f.help, openMetrics)}`)
    out.push(`# TYPE ${family} ${f.kind}`)
    if (f.kind === 'histogram') {
      for (const s of f.series.values()) {
        let cumulative = 0
        const les = [...f.bounds.map(float), '+Inf']
        les.forEach((le, i) => {
          cumulative += s.counts[i]
          const e = openMetrics ? s.exemplars[i] : undefined
          const exemplar = e === undefined ? '' : ` # {${e.labels}} ${float(e.value)} ${e.timestamp.toFixed(3)}`
          out.push(`${f.name}_bucket${labelText(f.labelNames, s.values, `le="${le}"`)} ${cumulative}${exemplar}`)
        })
        out.push(`${f.name}_sum${labelText(f.labelNames, s.values)} ${float(s.sum)}`)
        out.push(`${f.name}_count${labelText(f.labelNames, s.values)} ${s.count}`)
      }
    } else if (f.kind === 'counter') {
      for (const s of f.series.values()) out.push(`${f.name}${labelText(f.labelNames, s.values)} ${float(s.value)}`)
    } else {
      // A collected gauge always writes braces (its label names are never empty in tokentap).
      for (const s of f.series.values()) out.push(`${f.name}{${f.labelNames.map((n, i) => `${n}="${escapeValue(s.values[i])}"`).join(',')}} ${float(s.value)}`)
    }
    // The text format separates families with a blank line; OpenMetrics allows none.
    if (!openMetrics) out.push('')
  }
  // Then the process metrics, none here: prom-client's text of an empty registry is one line feed.
  if (openMetrics) out.push('# EOF')
  else out.push('')
  return `${out.join('\n')}\n`
}

// ---------------------------------------------------------------- random state

const LABEL_VALUES = ['openai', 'gpt-4o-mini', '/v1/chat/completions', '', 'we"ird', 'back\\slash', 'two\nlines', 'ünïcödé', '😀 emoji', '\\"\n', 'x'.repeat(130)]
const VALUES = [0, 1e-9, 0.0005, 0.004999, 0.005, 0.0051, 0.1, 0.25, 1, 1.5, 7, 42, 1e6, 2 ** 33, 1e300, -0.5, -3, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.NaN]
/** Counts are whole numbers in practice (k tokens × runs); fractions and 2³²+ take the slow path. */
const WEIGHTS = [1, 1, 1, 2, 3, 17, 1000, 2 ** 32 - 1, 2 ** 32, 2 ** 40, 0.5, 0, -1]
const BOUNDS = [0.0005, 0.005, 0.01, 0.1, 0.25, 1, 2.5, 10, 100, 1e6, 1e-7, 2.71, 120, 0.0001]

const labelValue = fc.constantFrom(...LABEL_VALUES)
const value = fc.oneof(fc.constantFrom(...VALUES), fc.double({ noNaN: false }))
const weight = fc.oneof(fc.constantFrom(...WEIGHTS), fc.integer({ min: 1, max: 5000 }))
const requestId = fc.oneof(fc.constantFrom('req-1', 'a"b', 'x\\y', 'line\nbreak', 'ü'.repeat(200)), fc.string({ maxLength: 40 }))

interface Op {
  /** Which series (by label values) of the family. */
  readonly labels: string[]
  readonly value: number
  readonly weight: number
  /** With an exemplar (histograms). */
  readonly exemplar: { id: string; timestamp: number } | undefined
}

const exemplar = fc.option(fc.record({ id: requestId, timestamp: fc.double({ min: 1.6e9, max: 1.8e9, noNaN: true }) }), { nil: undefined })

const familyPlan = fc.record({
  labelCount: fc.integer({ min: 0, max: 3 }),
  bounds: fc.uniqueArray(fc.constantFrom(...BOUNDS), { minLength: 1, maxLength: 14 }),
  help: fc.constantFrom('plain', 'with "quotes" and \\ and\nnewline', 'ünï'),
  ops: fc.array(
    fc.record({
      labels: fc.array(labelValue, { minLength: 3, maxLength: 3 }),
      value,
      weight,
      exemplar,
    }),
    { maxLength: 60 },
  ),
  /** Ops applied after a first scrape: the cached series change (rewritten in place, longer or shorter), new ones appear. */
  later: fc.array(fc.record({ labels: fc.array(labelValue, { minLength: 3, maxLength: 3 }), value, weight, exemplar }), { maxLength: 20 }),
})

interface Built {
  readonly registry: MetricsRegistry
  readonly model: ModelFamily[]
  /** Applies the plans' later ops to both. */
  later(): void
}

function build(plans: readonly PlanValue[]): Built {
  const registry = new MetricsRegistry({ processMetrics: false })
  const model: ModelFamily[] = []
  const apply: (() => void)[] = []
  plans.forEach((p, f) => {
    const labelNames = ['provider', 'model', 'route'].slice(0, p.labelCount)
    const pick = (op: Op): string[] => op.labels.slice(0, p.labelCount)
    // Histogram: the bounds as given (the family sorts them), the model sorted here.
    const h = new Histogram({ name: `h${f}_seconds`, help: p.help, labelNames, buckets: p.bounds })
    const mh: ModelHistogram = { kind: 'histogram', name: h.name, help: p.help, labelNames, bounds: [...p.bounds].sort((a, b) => a - b), series: new Map() }
    const observe = (op: Op): void => {
      const values = pick(op)
      const child = h.labels(...values)
      const key = values.join('\u0000')
      let s = mh.series.get(key)
      if (s === undefined) {
        s = { values, counts: new Array(mh.bounds.length + 1).fill(0), sum: 0, count: 0, exemplars: new Array(mh.bounds.length + 1).fill(undefined) }
        mh.series.set(key, s)
      }
      const labels = op.exemplar === undefined ? '' : requestIdExemplar(op.exemplar.id)
      if (op.exemplar === undefined) child.observe(op.value, op.weight)
      else child.observeWithExemplar(op.value, op.weight, labels, op.exemplar.timestamp)
      if (!(op.weight > 0) || Number.isNaN(op.value)) return
      let slot = mh.bounds.findIndex((b) => op.value <= b)
      if (slot < 0) slot = mh.bounds.length
      s.counts[slot] += op.weight
      s.sum += op.value * op.weight
      s.count += op.weight
      if (op.exemplar !== undefined) s.exemplars[slot] = { labels, value: op.value, timestamp: op.exemplar.timestamp }
    }
    // Counter: the same label sets, the weight as the increment.
    const c = new Counter({ name: `c${f}_total`, help: p.help, labelNames })
    const mc: ModelCounter = { kind: 'counter', name: c.name, help: p.help, labelNames, series: new Map() }
    const inc = (op: Op): void => {
      const values = pick(op)
      c.labels(...values).inc(op.weight)
      const key = values.join('\u0000')
      const s = mc.series.get(key) ?? { values, value: 0 }
      mc.series.set(key, s)
      if (op.weight > 0) s.value += op.weight
    }
    // Gauge: counted at the scrape from the ops' label sets, with three labels as tokentap's has.
    const gaugeCounts = new Map<string, { values: string[]; value: number }>()
    const g = new CollectedGauge({
      name: `g${f}`,
      help: p.help,
      labelNames: ['provider', 'model', 'route'],
      collect: (add) => {
        for (const s of gaugeCounts.values()) add(s.values, s.value)
      },
    })
    const mg: ModelGauge = { kind: 'gauge', name: g.name, help: p.help, labelNames: ['provider', 'model', 'route'], series: gaugeCounts }
    const gauge = (op: Op): void => {
      const key = op.labels.join('\u0000')
      const s = gaugeCounts.get(key) ?? { values: op.labels, value: 0 }
      gaugeCounts.set(key, s)
      s.value = Number.isFinite(op.value) ? op.value : s.value
    }
    for (const op of p.ops) {
      observe(op)
      inc(op)
      gauge(op)
    }
    apply.push(() => {
      for (const op of p.later) {
        observe(op)
        inc(op)
      }
    })
    registry.register(h)
    registry.register(c)
    registry.register(g)
    model.push(mh, mc, mg)
  })
  return {
    registry,
    model,
    later: () => {
      for (const a of apply) a()
    },
  }
}

type PlanValue = typeof familyPlan extends fc.Arbitrary<infer T> ? T : never

/** The first difference, for a readable failure. */
function firstDifference(a: string, b: string): string {
  let i = 0
  while (i < a.length && a[i] === b[i]) i++
  return `at ${i}: got ${JSON.stringify(a.slice(Math.max(0, i - 60), i + 60))}, want ${JSON.stringify(b.slice(Math.max(0, i - 60), i + 60))}`
}

t.test('the scrape is byte for byte what a plain serializer writes for the same state, in both formats, before and after series change', async (t) => {
  let runs = 0
  await fc.assert(
    fc.asyncProperty(fc.array(familyPlan, { minLength: 1, maxLength: 3 }), async (plans) => {
      const b = build(plans)
      for (const round of ['first', 'again (cached)', 'after changes']) {
        if (round === 'after changes') b.later()
        for (const openMetrics of [false, true]) {
          const got = await b.registry.text(openMetrics)
          const want = serialize(b.model, openMetrics)
          if (got !== want) throw new Error(`${round}, ${openMetrics ? 'OpenMetrics' : 'text'}: ${firstDifference(got, want)}`)
        }
      }
      runs++
    }),
    { numRuns: 300, seed: 13 },
  )
  t.equal(runs, 300, '300 random registries, each scraped three times in both formats')
})

t.test('two scrapes interleaved piece by piece share the render buffers and both come out whole', async (t) => {
  const plans = fc.sample(fc.array(familyPlan, { minLength: 3, maxLength: 3 }), { numRuns: 1, seed: 7 })[0]
  const b = build(plans)
  b.later()
  for (const openMetrics of [false, true]) {
    const want = serialize(b.model, openMetrics)
    const first = b.registry.exposition(openMetrics)[Symbol.asyncIterator]()
    const second = b.registry.exposition(!openMetrics)[Symbol.asyncIterator]()
    const parts: Buffer[][] = [[], []]
    let done = [false, false]
    while (!done[0] || !done[1]) {
      for (const [i, it] of [first, second].entries()) {
        if (done[i]) continue
        const r = await it.next()
        if (r.done === true) done = i === 0 ? [true, done[1]] : [done[0], true]
        else parts[i].push(...r.value.map((x) => Buffer.from(x)))
      }
    }
    t.equal(Buffer.concat(parts[0]).toString('utf8'), want, `${openMetrics ? 'OpenMetrics' : 'text'} whole beside the other`)
    t.equal(Buffer.concat(parts[1]).toString('utf8'), serialize(b.model, !openMetrics))
  }
})

t.test('series with no labels and single-bucket histograms write bare sample names', async (t) => {
  const b = build([{ labelCount: 0, bounds: [1], help: 'plain', ops: [{ labels: ['a', 'b', 'c'], value: 0.5, weight: 3, exemplar: { id: 'r', timestamp: 1.7e9 } }], later: [] }])
  const text = await b.registry.text(false)
  t.equal(text, serialize(b.model, false))
  t.match(text, /^h0_seconds_bucket\{le="\+Inf"\} 3$/m)
  t.match(text, /^h0_seconds_sum 1.5$/m)
  t.match(await b.registry.text(true), /^h0_seconds_bucket\{le="1"\} 3 # \{request_id="r"\} 0.5 1700000000.000$/m)
})
