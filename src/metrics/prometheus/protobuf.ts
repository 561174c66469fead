import type { HistogramCore } from '../../histogram/histogram-core.ts'
import type { PromClientMetric } from './openmetrics.ts'
import { ProtoWriter, varintBytes } from './protobuf-writer.ts'

/**
 * Prometheus's protobuf exposition: length-delimited `io.prometheus.client.MetricFamily` as `metrics.proto` of
 * prometheus/client_model v0.6.2 defines it, the only format carrying native histograms to Prometheus before 3.x.
 * A histogram series carries its classic buckets beside its native ones, so classic queries keep working.
 */

export const PROTOBUF_CONTENT_TYPE =
  'application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited'

/** `MetricType` of metrics.proto. */
export const MetricTypeCode = { counter: 0, gauge: 1, summary: 2, untyped: 3, histogram: 4 } as const

/** One media range of an `Accept` header. */
interface MediaRange {
  readonly type: string
  readonly params: ReadonlyMap<string, string>
  readonly q: number
}

function parseAccept(accept: string): MediaRange[] {
  const out: MediaRange[] = []
  for (const part of accept.split(',')) {
    const [type, ...rest] = part.split(';')
    const params = new Map<string, string>()
    for (const p of rest) {
      const eq = p.indexOf('=')
      if (eq > 0)
        params.set(
          p.slice(0, eq).trim().toLowerCase(),
          p
            .slice(eq + 1)
            .trim()
            .replace(/^"|"$/g, ''),
        )
    }
    const q = params.has('q') ? Number(params.get('q')) : 1
    out.push({ type: type.trim().toLowerCase(), params, q: Number.isFinite(q) ? q : 0 })
  }
  return out
}

const isProtobuf = (r: MediaRange): boolean =>
  r.type === 'application/vnd.google.protobuf' &&
  r.params.get('proto') === 'io.prometheus.client.MetricFamily' &&
  r.params.get('encoding') === 'delimited'

/** Whether an `Accept` header lists the delimited protobuf exposition with a q no lower than any text format's (a tie goes to the first listed). */
export function wantsProtobuf(accept: string | undefined): boolean {
  if (accept === undefined || !accept.includes('application/vnd.google.protobuf')) return false
  const ranges = parseAccept(accept)
  const proto = ranges.findIndex(isProtobuf)
  if (proto < 0 || !(ranges[proto].q > 0)) return false
  for (let i = 0; i < ranges.length; i++) {
    if (i === proto || isProtobuf(ranges[i])) continue
    const r = ranges[i]
    if (r.q > ranges[proto].q || (r.q === ranges[proto].q && i < proto)) return false
  }
  return true
}

/** `name="value",…` (the rendered, escaped form) back into pairs, for exemplar labels. */
function parseRenderedLabels(rendered: string): [string, string][] {
  const out: [string, string][] = []
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g
  for (let m = re.exec(rendered); m !== null; m = re.exec(rendered))
    out.push([m[1], m[2].replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))])
  return out
}

/** An exemplar as the protobuf message wants it. */
export interface ProtoExemplar {
  readonly labels: string
  readonly value: number
  /** Wall-clock seconds. */
  readonly timestamp: number
}

/** The shared writer: one encode at a time, each ends with `take()`. */
const w = new ProtoWriter(16 * 1024)

function labelPairs(field: number, names: readonly string[], values: readonly string[]): void {
  for (let i = 0; i < names.length; i++) {
    w.begin(field)
    w.string(1, names[i])
    w.string(2, values[i])
    w.end()
  }
}

function exemplar(field: number, e: ProtoExemplar): void {
  w.begin(field)
  for (const [name, value] of parseRenderedLabels(e.labels)) {
    w.begin(1)
    w.string(1, name)
    w.string(2, value)
    w.end()
  }
  w.double(2, e.value)
  // google.protobuf.Timestamp: seconds and nanos.
  const seconds = Math.floor(e.timestamp)
  w.begin(3)
  w.uint(1, seconds)
  const nanos = Math.round((e.timestamp - seconds) * 1e9)
  if (nanos > 0) w.uint(2, Math.min(nanos, 999_999_999))
  w.end()
  w.end()
}

/** A core's populated buckets as spans [first, last, …]; gaps of up to two empty buckets stay inside a span, as client_golang does. */
function spansOf(core: HistogramCore): number[] {
  const range = core.range()
  if (range === undefined) return []
  const spans: number[] = []
  let start = range.lo
  let end = range.lo
  for (let i = range.lo + 1; i <= range.hi; i++) {
    if (core.bucket(i) === 0) continue
    if (i - end > 3) {
      spans.push(start, end)
      start = i
    }
    end = i
  }
  spans.push(start, end)
  return spans
}

/** A count as the integer field when it is one, else the float field (counts stay whole in tokentap). */
function count(intField: number, floatField: number, n: number): void {
  if (Number.isSafeInteger(n) && n >= 0) w.uint(intField, n)
  else w.double(floatField, n)
}

/**
 * The Metric field of one histogram series: labels, cumulative classic buckets with exemplars and, when the core keeps
 * them, the native histogram (Prometheus needs timestamps on a native histogram's exemplars; ours have them).
 */
export function histogramMetric(
  names: readonly string[],
  values: readonly string[],
  core: HistogramCore,
  bounds: readonly number[],
  exemplars: readonly (ProtoExemplar | undefined)[] | undefined,
): Buffer {
  w.begin(4)
  labelPairs(1, names, values)
  w.begin(7)
  const integral = Number.isSafeInteger(core.count)
  count(1, 4, core.count)
  w.double(2, core.sum)
  const classic = core.classic
  if (classic !== undefined) {
    let cumulative = 0
    for (let i = 0; i < classic.length; i++) {
      cumulative += classic[i]
      w.begin(3)
      count(1, 4, cumulative)
      w.double(2, i < bounds.length ? bounds[i] : Number.POSITIVE_INFINITY)
      const e = exemplars?.[i]
      if (e !== undefined) exemplar(3, e)
      w.end()
    }
  }
  const schema = core.schema
  if (schema !== undefined) {
    w.sint(5, schema)
    w.double(6, core.zeroThreshold)
    count(7, 8, core.zeroCount)
    const spans = spansOf(core)
    if (spans.length === 0) {
      // A span of no buckets marks an empty series as native (client_golang does the same).
      w.begin(12)
      w.sint(1, 0)
      w.uint(2, 0)
      w.end()
    } else {
      let previousEnd = 0
      let whole = integral
      for (let i = 0; i < spans.length; i += 2) {
        w.begin(12)
        w.sint(1, i === 0 ? spans[0] : spans[i] - previousEnd - 1)
        w.uint(2, spans[i + 1] - spans[i] + 1)
        w.end()
        previousEnd = spans[i + 1]
        for (let b = spans[i]; b <= spans[i + 1] && whole; b++) if (!Number.isSafeInteger(core.bucket(b))) whole = false
      }
      // Deltas from the previous bucket when every count is whole, else the counts as doubles.
      w.begin(whole ? 13 : 14)
      let previous = 0
      for (let i = 0; i < spans.length; i += 2) {
        for (let b = spans[i]; b <= spans[i + 1]; b++) {
          const c = core.bucket(b)
          if (whole) {
            w.rawSint(c - previous)
            previous = c
          } else w.rawDouble(c)
        }
      }
      w.end()
    }
    if (exemplars !== undefined) {
      const sorted = exemplars.filter((e): e is ProtoExemplar => e !== undefined).sort((a, b) => a.value - b.value)
      for (const e of sorted) exemplar(16, e)
    }
  }
  w.end()
  w.end()
  return w.take()
}

/** The Metric field of a counter, gauge or untyped sample (`valueField`: 3, 2 or 5 of Metric). */
export function valueMetric(
  valueField: number,
  names: readonly string[],
  values: readonly string[],
  value: number,
): Buffer {
  w.begin(4)
  labelPairs(1, names, values)
  w.begin(valueField)
  w.double(1, value)
  w.end()
  w.end()
  return w.take()
}

/** The Metric field for a counter / gauge / untyped family type. */
export const VALUE_FIELD = { counter: 3, gauge: 2, untyped: 5 } as const

/** A whole delimited MetricFamily: length prefix and header as the first buffer, then the series' Metric fields. */
export function* familyChunks(name: string, help: string, type: number, series: readonly Buffer[]): Generator<Buffer> {
  w.string(1, name)
  w.string(2, help)
  w.uint(3, type)
  const head = w.take()
  let total = head.length
  for (const s of series) total += s.length
  yield Buffer.concat([varintBytes(total), head])
  yield* series
}

/** prom-client's process metrics (their JSON form) as delimited MetricFamilies; unknown types as untyped. */
export function promClientToProtobuf(metrics: readonly PromClientMetric[]): Buffer {
  const out: Buffer[] = []
  for (const m of metrics) {
    const values = m.values ?? []
    if (m.type === 'histogram') {
      out.push(...familyChunks(m.name, m.help, MetricTypeCode.histogram, processHistograms(m.name, values)))
      continue
    }
    const kind = m.type === 'counter' || m.type === 'gauge' ? m.type : 'untyped'
    const series: Buffer[] = []
    for (const v of values) {
      const labels = Object.entries(v.labels ?? {})
      series.push(
        valueMetric(
          VALUE_FIELD[kind],
          labels.map(([k]) => k),
          labels.map(([, x]) => String(x)),
          v.value,
        ),
      )
    }
    out.push(...familyChunks(m.name, m.help, MetricTypeCode[kind], series))
  }
  return Buffer.concat(out)
}

type JsonSample = NonNullable<PromClientMetric['values']>[number]

/** prom-client's histogram samples grouped back into series (by their labels without `le`). */
function processHistograms(name: string, values: readonly JsonSample[]): Buffer[] {
  const groups = new Map<
    string,
    { names: string[]; values: string[]; buckets: [number, number][]; sum: number; count: number }
  >()
  for (const v of values) {
    const entries = Object.entries(v.labels ?? {}).filter(([k]) => k !== 'le')
    const key = JSON.stringify(entries)
    let g = groups.get(key)
    if (g === undefined) {
      g = { names: entries.map(([k]) => k), values: entries.map(([, x]) => String(x)), buckets: [], sum: 0, count: 0 }
      groups.set(key, g)
    }
    if (v.metricName === `${name}_bucket`) {
      const le = v.labels?.le
      g.buckets.push([le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le), v.value])
    } else if (v.metricName === `${name}_sum`) g.sum = v.value
    else if (v.metricName === `${name}_count`) g.count = v.value
  }
  const out: Buffer[] = []
  for (const g of groups.values()) {
    w.begin(4)
    labelPairs(1, g.names, g.values)
    w.begin(7)
    count(1, 4, g.count)
    w.double(2, g.sum)
    for (const [upper, cumulative] of g.buckets.sort((a, b) => a[0] - b[0])) {
      w.begin(3)
      count(1, 4, cumulative)
      w.double(2, upper)
      w.end()
    }
    w.end()
    w.end()
    out.push(w.take())
  }
  return out
}
