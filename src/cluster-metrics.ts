import { AggregatorRegistry } from 'prom-client'
import { Counter } from './metrics/counter.ts'
import { CollectedGauge } from './metrics/gauge.ts'
import { Histogram } from './metrics/histogram.ts'
import type { Exemplar, NativeOptions } from './metrics/histogram.ts'
import { HistogramCore } from './metrics/histogram-core.ts'
import type { MetricJson } from './metrics/metric.ts'
import { promClientToOpenMetrics } from './metrics/openmetrics.ts'
import type { PromClientMetric } from './metrics/openmetrics.ts'
import { promClientToProtobuf } from './metrics/protobuf.ts'
import type { OwnMetric } from './metrics/registry.ts'
import type { MetricsSource } from './metrics/source.ts'

/**
 * The cluster primary's /metrics: what one process would serve had it proxied every worker's
 * requests. Each worker sends the *state* of its own families (definitions, and per series a
 * counter's value, a gauge's value, or a histogram's HistogramCore state: classic counts, sum,
 * count, exponential buckets, and the exemplars), not their text; the primary builds the same
 * families afresh for every scrape, merges every worker's state into them (HistogramCore#merge:
 * bucket by bucket, the exponential buckets at the lower schema of the two, so merging equals
 * observing in one process) and renders them with the families' own exposition, OpenMetrics and
 * exemplars included. prom-client's process metrics are summed with its AggregatorRegistry, the
 * primary's own included (the group's CPU and memory). A worker that dies leaves its counters and
 * histograms behind (`retire`), its process CPU and GC ones too, so no sum ever goes down (a drop
 * would read as a counter reset); what the primary records itself of a dead worker's requests in
 * flight (cluster-progress.ts) is merged like a worker's.
 */

/** One HistogramCore's figures, as the structured clone of the cluster channel carries them. */
interface CoreState {
  readonly schema: number | undefined
  readonly zeroThreshold: number
  readonly maxBuckets: number
  readonly count: number
  readonly sum: number
  readonly zeroCount: number
  readonly min: number
  readonly max: number
  /** Non-cumulative classic counts (the last slot is +Inf), when the core keeps classic buckets. */
  readonly classic: Float64Array | undefined
  /** Populated exponential buckets: indexes and counts, ascending. */
  readonly indexes: Int32Array
  readonly counts: Float64Array
}

interface SeriesState {
  readonly labels: readonly string[]
  /** A counter's or a gauge's value. */
  readonly value?: number
  readonly core?: CoreState
  /** A histogram's exemplar per classic slot. */
  readonly exemplars?: readonly (Exemplar | undefined)[]
}

/** One family: its definition and its series; what a worker sends per family, and what the primary merges. */
export interface FamilyState {
  readonly name: string
  readonly help: string
  readonly type: 'counter' | 'gauge' | 'histogram'
  readonly labelNames: readonly string[]
  /** A histogram's classic bounds and native settings. */
  readonly buckets?: readonly number[]
  readonly native?: NativeOptions
  readonly series: readonly SeriesState[]
}

/** What a worker answers a metrics request with. */
export interface WorkerMetrics {
  readonly families: readonly FamilyState[]
  /** prom-client's process metrics, summed by AggregatorRegistry. */
  readonly process: readonly MetricJson[]
  /** The last progress batch the worker sent before taking this state (cluster-progress.ts): the requests ended in it and before are counted here. */
  readonly progress?: number
}

/** What the primary adds to its workers' sums besides them. */
export interface ClusterMetricsOptions {
  /** Families the primary records itself (a dead worker's requests in flight, cluster-progress.ts). */
  readonly own?: readonly OwnMetric[]
  /** The primary's own prom-client process metrics: the group's CPU and memory include it. */
  readonly processJson?: () => Promise<MetricJson[]>
  /** A worker's report is now the one kept for it (what its death would leave). */
  readonly onReport?: (workerId: number, report: WorkerMetrics) => void
}

function coreState(core: HistogramCore): CoreState {
  const indexes: number[] = []
  const counts: number[] = []
  core.forEachBucket((index, count) => {
    indexes.push(index)
    counts.push(count)
  })
  return {
    schema: core.schema,
    zeroThreshold: core.zeroThreshold,
    maxBuckets: core.maxBuckets,
    count: core.count,
    sum: core.sum,
    zeroCount: core.zeroCount,
    min: core.min,
    max: core.max,
    classic: core.classic === undefined ? undefined : Float64Array.from(core.classic),
    indexes: Int32Array.from(indexes),
    counts: Float64Array.from(counts),
  }
}

/** A HistogramCore holding exactly a state's figures (classic bounds from the family that reads it). */
function coreFromState(state: CoreState, bounds: Float64Array | undefined): HistogramCore {
  const core = new HistogramCore({ schema: state.schema, zeroThreshold: state.zeroThreshold, maxBuckets: state.maxBuckets, bounds })
  // Each bucket at its own index (the core's schema is the state's); sum, count and the extremes are set after.
  if (state.schema !== undefined) for (let i = 0; i < state.indexes.length; i++) core.observeIndexed(0, state.counts[i], state.indexes[i], state.schema)
  core.count = state.count
  core.sum = state.sum
  core.zeroCount = state.zeroCount
  core.min = state.min
  core.max = state.max
  if (core.classic !== undefined && state.classic !== undefined) core.classic.set(state.classic.subarray(0, core.classic.length))
  return core
}

const labelValues = (labelNames: readonly string[], labels: Record<string, string | number>): string[] => labelNames.map((n) => String(labels[n]))

/** A family's state (the worker side). */
export function familyState(m: OwnMetric): FamilyState {
  const base = { name: m.name, help: m.help, labelNames: m.labelNames }
  if (m instanceof Histogram) {
    const series: SeriesState[] = []
    for (const s of m.entries()) series.push({ labels: s.labelValues, core: coreState(s.core), ...(s.exemplars === undefined ? {} : { exemplars: [...s.exemplars] }) })
    return { ...base, type: 'histogram', buckets: m.buckets, ...(m.native === undefined ? {} : { native: m.native }), series }
  }
  // A counter's or a gauge's samples: one value per label set (a gauge counted now).
  const series = m.get().values.map((v) => ({ labels: labelValues(m.labelNames, v.labels), value: v.value }))
  return { ...base, type: m.type, series }
}

/** Exemplar per classic slot: the latest of both. */
function mergeExemplars(into: (Exemplar | undefined)[], from: readonly (Exemplar | undefined)[]): void {
  for (let i = 0; i < into.length && i < from.length; i++) {
    const e = from[i]
    if (e !== undefined && (into[i] === undefined || e.timestamp >= (into[i] as Exemplar).timestamp)) into[i] = e
  }
}

/** A family of tokentap's own kind, built from states and merged from any number of them. */
class MergedFamily {
  readonly metric: OwnMetric
  readonly #gauge = new Map<string, { labels: readonly string[]; value: number }>()

  constructor(def: FamilyState) {
    const opts = { name: def.name, help: def.help, labelNames: def.labelNames }
    if (def.type === 'histogram') this.metric = new Histogram({ ...opts, buckets: def.buckets ?? [], native: def.native })
    else if (def.type === 'counter') this.metric = new Counter(opts)
    else {
      this.metric = new CollectedGauge({
        ...opts,
        collect: (add) => {
          for (const g of this.#gauge.values()) add(g.labels, g.value)
        },
      })
    }
  }

  merge(state: FamilyState): void {
    const m = this.metric
    for (const s of state.series) {
      if (m instanceof Histogram) {
        if (s.core === undefined) continue
        const series = m.labels(...s.labels)
        series.core.merge(coreFromState(s.core, series.core.bounds))
        if (s.exemplars !== undefined) {
          series.exemplars ??= new Array<Exemplar | undefined>(series.counts.length).fill(undefined)
          mergeExemplars(series.exemplars, s.exemplars)
        }
      } else if (m instanceof Counter) {
        // Made even at 0, as in the worker: the series is there for rate() to see.
        m.labels(...s.labels).inc(s.value ?? 0)
      } else {
        const key = s.labels.join('\u0000')
        const g = this.#gauge.get(key)
        if (g === undefined) this.#gauge.set(key, { labels: s.labels, value: s.value ?? 0 })
        else g.value += s.value ?? 0
        m.touch(s.labels)
      }
    }
  }
}

/** Families merged from states, in the order they first came. */
export class MergedFamilies {
  readonly #families = new Map<string, MergedFamily>()

  merge(states: readonly FamilyState[]): this {
    for (const state of states) {
      let f = this.#families.get(state.name)
      if (f === undefined) {
        f = new MergedFamily(state)
        this.#families.set(state.name, f)
      }
      f.merge(state)
    }
    return this
  }

  get metrics(): OwnMetric[] {
    return Array.from(this.#families.values(), (f) => f.metric)
  }

  /** The merged families' own state (to keep a dead worker's counts in one state). */
  states(): FamilyState[] {
    return this.metrics.map(familyState)
  }
}

const NEWLINE = Buffer.from('\n')
const EOF = Buffer.from('# EOF\n')

/** Only what keeps counting: a dead worker's counters and histograms, not its gauges. */
const retainable = (f: { readonly type: string }): boolean => f.type === 'counter' || f.type === 'histogram'

/** A prom-client sample's identity within its family: its own name and labels. */
const sampleKey = (v: MetricJson['values'][number]): string => `${v.metricName ?? ''}\u0000${JSON.stringify(v.labels)}`

/**
 * `from`'s counters and histograms added into `into` (prom-client's JSON form, sample by
 * sample), synchronously: a dead worker's process counters stay in the sums as its llm_ ones do.
 */
function addProcessCounters(into: readonly MetricJson[], from: readonly MetricJson[]): MetricJson[] {
  const out = new Map(into.map((f) => [f.name, f]))
  for (const f of from) {
    if (!retainable(f)) continue
    const prev = out.get(f.name)
    const values = new Map((prev?.values ?? []).map((v) => [sampleKey(v), { ...v }]))
    for (const v of f.values) {
      const key = sampleKey(v)
      const had = values.get(key)
      if (had === undefined) values.set(key, { ...v })
      else values.set(key, { ...had, value: had.value + v.value })
    }
    out.set(f.name, { ...(prev ?? f), values: [...values.values()] })
  }
  return [...out.values()]
}

/**
 * The primary's MetricsSource: `collect()` asks every live worker for its state (cluster.ts);
 * the exposition merges them with what dead workers left.
 */
export class ClusterMetrics implements MetricsSource {
  readonly openMetrics = true
  readonly #collect: () => Promise<{ readonly reports: readonly WorkerMetrics[]; readonly workerIds: readonly number[] }>
  /** Each live worker's last report, kept for when it dies. */
  readonly #last = new Map<number, WorkerMetrics>()
  /** What dead workers counted, merged into one state. */
  #retired: FamilyState[] = []
  /** Workers retired: a report of theirs that arrives later is not used (its older one is in #retired). */
  readonly #dead = new Set<number>()
  /** What dead workers' processes counted (CPU seconds, GC), summed. */
  #retiredProcess: MetricJson[] = []
  readonly #options: ClusterMetricsOptions

  constructor(collect: () => Promise<{ readonly reports: readonly WorkerMetrics[]; readonly workerIds: readonly number[] }>, options: ClusterMetricsOptions = {}) {
    this.#collect = collect
    this.#options = options
  }

  /** The families of these reports, of the dead workers and of the primary's own, merged. */
  merged(reports: readonly WorkerMetrics[]): MergedFamilies {
    const families = new MergedFamilies()
    for (const r of reports) families.merge(r.families)
    families.merge(this.#retired)
    if (this.#options.own !== undefined) families.merge(this.#options.own.map(familyState))
    return families
  }

  /** The process metrics of the live workers, the dead ones' counters, and the primary's own, aggregated. */
  async #processMetrics(reports: readonly WorkerMetrics[]): Promise<ReturnType<typeof AggregatorRegistry.aggregate>> {
    const all = reports.map((r) => r.process)
    if (this.#retiredProcess.length > 0) all.push(this.#retiredProcess)
    if (this.#options.processJson !== undefined) all.push(await this.#options.processJson())
    return AggregatorRegistry.aggregate(all as never)
  }

  /**
   * A worker died: its last reported counters and histograms stay in the sums. Synchronous, so
   * no scrape sees its counts missing from both the live reports and the retired state.
   */
  retire(workerId: number): void {
    this.#dead.add(workerId)
    const last = this.#last.get(workerId)
    this.#last.delete(workerId)
    if (last === undefined) return
    this.#retired = new MergedFamilies().merge(this.#retired).merge(last.families.filter(retainable)).states()
    this.#retiredProcess = addProcessCounters(this.#retiredProcess, last.process)
  }

  /** Every live worker's report, minus those of workers that died while the scrape waited. */
  async #reports(): Promise<WorkerMetrics[]> {
    const answered = await this.#collect()
    // A worker that died while the scrape waited is in #retired with its previous report: its
    // newer one would count that part twice.
    const reports: WorkerMetrics[] = []
    answered.reports.forEach((r, i) => {
      const id = answered.workerIds[i]
      if (this.#dead.has(id)) return
      this.#last.set(id, r)
      this.#options.onReport?.(id, r)
      reports.push(r)
    })
    return reports
  }

  async *exposition(openMetrics: boolean): AsyncGenerator<Buffer[]> {
    const reports = await this.#reports()
    const out: Buffer[] = []
    for (const m of this.merged(reports).metrics) {
      for (const b of m.chunks(openMetrics)) out.push(b)
      // OpenMetrics allows no blank lines between families.
      if (!openMetrics) out.push(NEWLINE)
    }
    const processMetrics = await this.#processMetrics(reports)
    if (openMetrics) {
      out.push(Buffer.from(promClientToOpenMetrics((await processMetrics.getMetricsAsJSON()) as unknown as PromClientMetric[])))
      out.push(EOF)
    } else out.push(Buffer.from(await processMetrics.metrics()))
    yield out
  }

  /** The protobuf exposition of the merged families: native histograms merged bucket by bucket. */
  readonly protobuf = (): AsyncGenerator<Buffer[]> => this.#protobuf()

  async *#protobuf(): AsyncGenerator<Buffer[]> {
    const reports = await this.#reports()
    const out: Buffer[] = []
    for (const m of this.merged(reports).metrics) for (const b of m.protobufChunks()) out.push(b)
    const processMetrics = await this.#processMetrics(reports)
    out.push(promClientToProtobuf((await processMetrics.getMetricsAsJSON()) as unknown as PromClientMetric[]))
    yield out
  }
}
