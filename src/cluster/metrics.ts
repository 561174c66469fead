import { AggregatorRegistry } from 'prom-client'
import { Counter } from '../metrics/prometheus/counter.ts'
import { CollectedGauge } from '../metrics/prometheus/gauge.ts'
import { Histogram } from '../metrics/prometheus/histogram.ts'
import type { Exemplar, NativeOptions } from '../metrics/prometheus/histogram.ts'
import type { HistogramCore } from '../histogram/histogram-core.ts'
import { coreFromState, coreState, fillCore, stateSchema } from '../histogram/state.ts'
import type { CoreState } from '../histogram/state.ts'
import { FOLDED_FAMILY } from '../record/label-fold.ts'
import type { FoldPass, GroupLabelFold, SeriesMapper } from '../record/label-fold.ts'
import type { MetricJson } from '../metrics/prometheus/metric.ts'
import { MetricsRegistry } from '../metrics/prometheus/registry.ts'
import type { OwnMetric, ProcessSource } from '../metrics/prometheus/registry.ts'
import type { MetricsSource } from '../metrics/prometheus/source.ts'

/**
 * The cluster primary's /metrics: what one process would serve had it proxied every worker's
 * requests. Workers send their families' *state* (only what changed), which the primary merges
 * exactly (HistogramCore#merge) and renders with the families' own exposition; a dead worker's
 * counters and histograms stay in the sums (`retire`), since a drop would read as a counter reset.
 */

interface SeriesState {
  readonly labels: readonly string[]
  readonly value?: number
  readonly core?: CoreState
  /** A histogram's exemplar per classic slot. */
  readonly exemplars?: readonly (Exemplar | undefined)[]
}

/** One family: its definition and its series; what a worker sends per family, and what the primary merges. */
interface FamilyState {
  readonly name: string
  readonly help: string
  readonly type: 'counter' | 'gauge' | 'histogram'
  readonly labelNames: readonly string[]
  readonly buckets?: readonly number[]
  readonly native?: NativeOptions
  readonly series: readonly SeriesState[]
}

export interface WorkerMetrics {
  readonly families: readonly FamilyState[]
  /** prom-client's process metrics, summed by AggregatorRegistry. */
  readonly process: readonly MetricJson[]
  /** The last progress batch the worker sent before taking this state (cluster/progress.ts): the requests ended in it and before are counted here. */
  readonly progress?: number
  /** This report's number (StateReporter), and the one it adds to: undefined for every series in full. */
  readonly seq?: number
  readonly base?: number
}

export interface ClusterMetricsOptions {
  /** Families the primary records itself (a dead worker's requests in flight, cluster/progress.ts). */
  readonly own?: readonly OwnMetric[]
  /** The primary's own prom-client process metrics: the group's CPU and memory include it. */
  readonly processJson?: () => Promise<MetricJson[]>
  /** A worker's report is now the one kept for it (what its death would leave). */
  readonly onReport?: (workerId: number, report: WorkerMetrics) => void
  /** The group's label caps (label-fold.ts), applied to every series as it is merged; none: labels as the workers sent them. */
  readonly fold?: GroupLabelFold
}

const labelValues = (labelNames: readonly string[], labels: Record<string, string | number>): string[] =>
  labelNames.map((n) => String(labels[n]))

/** A family's state (worker side); with `changed`, only the counters' and histograms' changed series (gauges always whole). */
function stateOf(m: OwnMetric, changed: (series: object, now: number) => boolean): FamilyState {
  const base = { name: m.name, help: m.help, labelNames: m.labelNames }
  if (m instanceof Histogram) {
    const series: SeriesState[] = []
    for (const s of m.entries()) {
      if (!changed(s, s.core.count)) continue
      series.push({
        labels: s.labelValues,
        core: coreState(s.core),
        ...(s.exemplars === undefined ? {} : { exemplars: [...s.exemplars] }),
      })
    }
    return {
      ...base,
      type: 'histogram',
      buckets: m.buckets,
      ...(m.native === undefined ? {} : { native: m.native }),
      series,
    }
  }
  if (m instanceof Counter) {
    const series: SeriesState[] = []
    for (const s of m.entries()) if (changed(s, s.value)) series.push({ labels: s.labelValues, value: s.value })
    return { ...base, type: 'counter', series }
  }
  const series = m.get().values.map((v) => ({ labels: labelValues(m.labelNames, v.labels), value: v.value }))
  return { ...base, type: m.type, series }
}

/**
 * Worker side: only what changed since the report the primary applied last (`applied`), else
 * everything (a lost report, the first one): a scrape costs what changed, not every series.
 */
export class StateReporter {
  #seq = 0
  /** Per series: its count (histogram) or value (counter) in the last report. */
  #sent = new WeakMap<object, number>()

  report(
    families: readonly OwnMetric[],
    applied: number | undefined,
  ): Pick<WorkerMetrics, 'families' | 'seq' | 'base'> {
    const full = applied !== this.#seq
    if (full) this.#sent = new WeakMap()
    const sent = this.#sent
    const changed = (series: object, now: number): boolean => {
      if (sent.get(series) === now) return false
      sent.set(series, now)
      return true
    }
    const base = full ? undefined : this.#seq
    return { families: families.map((f) => stateOf(f, changed)), seq: ++this.#seq, base }
  }
}

/** Exemplar per classic slot: the latest of both. */
function mergeExemplars(into: (Exemplar | undefined)[], from: readonly (Exemplar | undefined)[]): void {
  for (let i = 0; i < into.length && i < from.length; i++) {
    const e = from[i]
    if (e !== undefined && (into[i] === undefined || e.timestamp >= (into[i] as Exemplar).timestamp)) into[i] = e
  }
}

/** Only what keeps counting: a dead worker's counters and histograms, not its gauges. */
const retainable = (f: { readonly type: string }): boolean => f.type === 'counter' || f.type === 'histogram'

/** A prom-client sample's identity within its family: its own name and labels. */
const sampleKey = (v: MetricJson['values'][number]): string => `${v.metricName ?? ''}\u0000${JSON.stringify(v.labels)}`

/** `from`'s counters and histograms added into `into`: a dead worker's process counters stay in the sums as its llm_ ones do. */
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

/** Contributors besides the workers: what dead workers left, summed, and the primary's own families. */
const DEAD = -1
const OWN = 0
/** The requests the primary's fold moved into an overflow set, in FOLDED_FAMILY. */
const FOLD = -2

const foldedTotal = (pass: FoldPass | undefined): number => {
  let n = 0
  for (const f of pass?.foldedRequests.values() ?? []) n += f.count
  return n
}

interface Part {
  readonly from: number
  /** The series' labels as its contributor sent them (the group's fold may merge several into one). */
  readonly raw: string
  /** Requests of llm_requests_total the group's budget folded into this series (they count in FOLDED_FAMILY). */
  readonly folded?: number
  readonly core?: HistogramCore
  exemplars?: readonly (Exemplar | undefined)[]
  value?: number
}

interface Slot {
  readonly labels: readonly string[]
  readonly parts: Part[]
}

/** A merged family kept between scrapes: only a series whose part changed is merged and rendered again. */
class LiveFamily {
  readonly metric: OwnMetric
  readonly #slots = new Map<string, Slot>()
  readonly #gauge = new Map<string, number>()
  readonly #bounds: Float64Array | undefined

  constructor(def: FamilyState) {
    const opts = { name: def.name, help: def.help, labelNames: def.labelNames }
    if (def.type === 'histogram') {
      const h = new Histogram({ ...opts, buckets: def.buckets ?? [], native: def.native })
      this.#bounds = h.newCore().bounds
      this.metric = h
    } else if (def.type === 'counter') this.metric = new Counter(opts)
    else {
      const slots = this.#slots
      const gauge = this.#gauge
      this.metric = new CollectedGauge({
        ...opts,
        collect: (add) => {
          for (const [key, slot] of slots) add(slot.labels, gauge.get(key) ?? 0)
        },
      })
    }
  }

  /** A contributor's series, mapped by the group's fold; with `full` (and always for a gauge) its parts not in `state` go. */
  apply(from: number, state: FamilyState, full: boolean, fold?: SeriesMapper, pass?: FoldPass): void {
    const dirty = new Set<string>()
    if (full || this.metric.type === 'gauge') {
      for (const [key, slot] of this.#slots) {
        const before = slot.parts.length
        for (let i = slot.parts.length - 1; i >= 0; i--) if (slot.parts[i].from === from) slot.parts.splice(i, 1)
        if (slot.parts.length !== before) dirty.add(key)
      }
    }
    const counts = pass !== undefined && state.name === 'llm_requests_total'
    for (const s of state.series) {
      const raw = s.labels.join('\u0000')
      const foldedBefore = counts ? foldedTotal(pass) : 0
      const labels = fold === undefined ? s.labels : fold(s.labels, s.value)
      const folded = counts ? foldedTotal(pass) - foldedBefore : 0
      const key = labels === s.labels ? raw : labels.join('\u0000')
      let slot = this.#slots.get(key)
      if (slot === undefined) {
        slot = { labels, parts: [] }
        this.#slots.set(key, slot)
      }
      const i = slot.parts.findIndex((p) => p.from === from && p.raw === raw)
      // A part's core is filled again when its schema has not changed (no garbage per series and scrape).
      const had = i < 0 ? undefined : slot.parts[i].core
      const reuse = s.core !== undefined && had !== undefined && had.schema === stateSchema(s.core)
      if (reuse) had.clear()
      const part: Part =
        s.core === undefined
          ? { from, raw, value: s.value ?? 0, ...(folded > 0 ? { folded } : {}) }
          : {
              from,
              raw,
              core: reuse ? fillCore(had, s.core) : coreFromState(s.core, this.#bounds),
              exemplars: s.exemplars,
            }
      if (i < 0) slot.parts.push(part)
      else slot.parts[i] = part
      dirty.add(key)
    }
    for (const key of dirty) this.#merge(key)
  }

  /** Requests the group's budget folded, by the overflow series they went to (labels by name). */
  folded(): Map<string, { labels: Record<string, string>; count: number }> {
    const out = new Map<string, { labels: Record<string, string>; count: number }>()
    for (const [key, slot] of this.#slots) {
      let n = 0
      for (const p of slot.parts) n += p.folded ?? 0
      if (n === 0) continue
      const labels: Record<string, string> = {}
      this.metric.labelNames.forEach((name, i) => {
        labels[name] = slot.labels[i]
      })
      out.set(key, { labels, count: n })
    }
    return out
  }

  /** The total of a counter family's series, parts of contributor `except` left out. */
  total(except: number): number {
    let n = 0
    for (const slot of this.#slots.values()) for (const p of slot.parts) if (p.from !== except) n += p.value ?? 0
    return n
  }

  /** Sets contributor `from`'s value of the series with these labels (a counter the primary adds to). */
  set(from: number, labels: readonly string[], value: number): void {
    const key = labels.join('\u0000')
    let slot = this.#slots.get(key)
    if (slot === undefined) {
      slot = { labels, parts: [] }
      this.#slots.set(key, slot)
    }
    const i = slot.parts.findIndex((p) => p.from === from)
    if (i < 0) slot.parts.push({ from, raw: key, value })
    else slot.parts[i] = { from, raw: key, value }
    this.#merge(key)
  }

  /** A dead contributor's counts move into the dead workers' part (the sums stay as they are); its gauges go. */
  retire(from: number): void {
    for (const [key, slot] of this.#slots) {
      const i = slot.parts.findIndex((p) => p.from === from)
      if (i < 0) continue
      const [part] = slot.parts.splice(i, 1)
      if (this.metric.type === 'gauge') {
        this.#merge(key)
        continue
      }
      const dead = slot.parts.find((p) => p.from === DEAD && p.raw === part.raw)
      if (dead === undefined) slot.parts.push({ ...part, from: DEAD })
      else if (dead.core !== undefined && part.core !== undefined) {
        dead.core.merge(part.core)
        if (part.exemplars !== undefined) {
          const into = [...(dead.exemplars ?? new Array<Exemplar | undefined>(part.exemplars.length).fill(undefined))]
          mergeExemplars(into, part.exemplars)
          dead.exemplars = into
        }
      } else {
        dead.value = (dead.value ?? 0) + (part.value ?? 0)
        if (part.folded !== undefined)
          slot.parts[slot.parts.indexOf(dead)] = { ...dead, folded: (dead.folded ?? 0) + part.folded }
      }
    }
  }

  #merge(key: string): void {
    const slot = this.#slots.get(key) as Slot
    const m = this.metric
    if (m instanceof Histogram) {
      const series = m.labels(...slot.labels)
      series.core.clear()
      let exemplars: (Exemplar | undefined)[] | undefined
      for (const p of slot.parts) {
        if (p.core !== undefined) series.core.merge(p.core)
        if (p.exemplars === undefined) continue
        exemplars ??= new Array<Exemplar | undefined>(series.counts.length).fill(undefined)
        mergeExemplars(exemplars, p.exemplars)
      }
      series.exemplars = exemplars
      series.exposition = undefined
      series.expositionWithExemplars = undefined
      series.protobuf = undefined
      return
    }
    let value = 0
    for (const p of slot.parts) value += p.value ?? 0
    if (m instanceof Counter) m.labels(...slot.labels).value = value
    else {
      this.#gauge.set(key, value)
      m.touch(slot.labels)
    }
  }
}

/**
 * The primary's MetricsSource: asks every live worker for what changed since its last applied report,
 * keeps the merged families between scrapes, and re-renders only the series that changed.
 */
export class ClusterMetrics implements MetricsSource {
  readonly openMetrics = true
  readonly #collect: () => Promise<{
    readonly reports: readonly WorkerMetrics[]
    readonly workerIds: readonly number[]
  }>
  readonly #options: ClusterMetricsOptions
  readonly #families = new Map<string, LiveFamily>()
  readonly #registry: MetricsRegistry
  readonly #applied = new Map<number, number | undefined>()
  readonly #process = new Map<number, readonly MetricJson[]>()
  /** Workers retired: a report of theirs that arrives later is not used (what they counted until then is in the sums). */
  readonly #dead = new Set<number>()
  #retiredProcess: MetricJson[] = []
  readonly #own = new StateReporter()
  #ownApplied: number | undefined

  constructor(
    collect: () => Promise<{ readonly reports: readonly WorkerMetrics[]; readonly workerIds: readonly number[] }>,
    options: ClusterMetricsOptions = {},
  ) {
    this.#collect = collect
    this.#options = options
    this.#registry = new MetricsRegistry({
      processMetrics: false,
      protobuf: true,
      processSource: () => this.#processMetrics(),
    })
  }

  /** The number of the last report of this worker applied here (what it answers a metrics question against). */
  applied(workerId: number): number | undefined {
    return this.#applied.get(workerId)
  }

  /** A worker died: its counters and histograms stay in the sums, its gauges go; synchronous, so no scrape sees a drop. */
  retire(workerId: number): void {
    if (this.#dead.has(workerId)) return
    this.#dead.add(workerId)
    this.#applied.delete(workerId)
    for (const f of this.#families.values()) f.retire(workerId)
    const last = this.#process.get(workerId)
    this.#process.delete(workerId)
    if (last !== undefined) this.#retiredProcess = addProcessCounters(this.#retiredProcess, last)
  }

  /** Applies a contributor's report; false when it does not follow the one applied last (a full one comes next). */
  #apply(from: number, report: Pick<WorkerMetrics, 'families' | 'seq' | 'base'>): boolean {
    const full = report.base === undefined
    const applied = this.#applied.get(from)
    if (!full && report.base !== applied) return false
    if (full && report.seq !== undefined && applied !== undefined && applied >= report.seq) return false
    const pass = this.#options.fold?.pass()
    for (const state of report.families) {
      let f = this.#families.get(state.name)
      if (f === undefined) {
        f = new LiveFamily(state)
        this.#families.set(state.name, f)
        this.#registry.register(f.metric)
      }
      f.apply(from, state, full, pass?.family(state.name, state.labelNames), pass)
    }
    this.#applied.set(from, report.seq)
    return true
  }

  /** Every live worker's report applied, minus those of workers that died while the scrape waited; then the primary's own. */
  async #update(): Promise<void> {
    const answered = await this.#collect()
    answered.reports.forEach((r, i) => {
      const id = answered.workerIds[i]
      // A worker that died meanwhile is counted by what it left: its newer report would count that twice.
      if (this.#dead.has(id) || !this.#apply(id, r)) return
      this.#process.set(id, r.process)
      this.#options.onReport?.(id, r)
    })
    const own = this.#options.own
    if (own !== undefined) {
      const r = this.#own.report(own, this.#ownApplied)
      this.#apply(OWN, r)
      this.#ownApplied = r.seq
    }
    this.#foldedCount()
  }

  /** The group's llm_label_sets_folded_total: what the workers folded, plus the requests the primary's fold moved. */
  #foldedCount(): void {
    const fold = this.#options.fold
    const counter = this.#families.get(FOLDED_FAMILY)
    const requests = this.#families.get('llm_requests_total')
    if (fold === undefined || counter === undefined || requests === undefined) return
    const sums = new Map<string, { labels: string[]; count: number }>()
    for (const f of requests.folded().values()) {
      const labels = counter.metric.labelNames.map((n) => f.labels[n] ?? '')
      const key = labels.join('\u0000')
      const had = sums.get(key)
      if (had === undefined) sums.set(key, { labels, count: f.count })
      else had.count += f.count
    }
    for (const { labels, count } of sums.values()) counter.set(FOLD, labels, count)
    fold.noteFolded(counter.total(Number.NaN))
  }

  /** The process metrics of the live workers, the dead ones' counters, and the primary's own, aggregated. */
  async #processMetrics(): Promise<ProcessSource> {
    const all: (readonly MetricJson[])[] = [...this.#process.values()]
    if (this.#retiredProcess.length > 0) all.push(this.#retiredProcess)
    if (this.#options.processJson !== undefined) all.push(await this.#options.processJson())
    return AggregatorRegistry.aggregate(all as never)
  }

  async *exposition(openMetrics: boolean): AsyncGenerator<Buffer[]> {
    await this.#update()
    yield* this.#registry.exposition(openMetrics)
  }

  /** The protobuf exposition of the merged families: native histograms merged bucket by bucket. */
  readonly protobuf = (): AsyncGenerator<Buffer[]> => this.#protobuf()

  async *#protobuf(): AsyncGenerator<Buffer[]> {
    await this.#update()
    yield* (this.#registry.protobuf as () => AsyncGenerator<Buffer[]>)()
  }

  recycle(batch: readonly Buffer[]): void {
    this.#registry.recycle(batch)
  }
}
