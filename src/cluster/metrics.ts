import { AggregatorRegistry } from 'prom-client'
import { Counter } from '../metrics/prometheus/counter.ts'
import type { CounterSeries } from '../metrics/prometheus/counter.ts'
import { CollectedGauge } from '../metrics/prometheus/gauge.ts'
import type { GaugeSample } from '../metrics/prometheus/gauge.ts'
import { Histogram } from '../metrics/prometheus/histogram.ts'
import type { Exemplar, HistogramSeries, NativeOptions } from '../metrics/prometheus/histogram.ts'
import {
  CORE_STATE_MIN,
  addIncrease,
  addState,
  coreFromState,
  coreState,
  observeState,
  stateLength,
  writeState,
} from '../histogram/state.ts'
import type { CoreState } from '../histogram/state.ts'
import { FOLDED_FAMILY } from '../record/label-fold.ts'
import type { FoldPass, GroupLabelFold, SeriesMapper } from '../record/label-fold.ts'
import type { Metric, MetricJson, Tracked } from '../metrics/prometheus/metric.ts'
import { MetricsRegistry } from '../metrics/prometheus/registry.ts'
import type { OwnMetric, ProcessSource } from '../metrics/prometheus/registry.ts'
import type { MetricsSource } from '../metrics/prometheus/source.ts'

/**
 * The cluster primary's /metrics: what one process would serve had it proxied every worker's
 * requests. Workers send their families' *state* (only the series that changed), which the primary merges
 * exactly (state.ts: a changed part adds its increase) and renders with the families' own exposition; a dead worker's
 * counters and histograms stay in the sums (`retire`), since a drop would read as a counter reset.
 */

/** A family's definition: sent with its first report (and every full one), which makes it at the primary. */
interface FamilyDef {
  readonly help: string
  readonly type: 'counter' | 'gauge' | 'histogram'
  readonly labelNames: readonly string[]
  readonly buckets?: readonly number[]
  readonly native?: NativeOptions
}

/**
 * One family in a report: the series that changed since the last report, packed so the structured clone stays cheap
 * (one typed array a family, label values only the first time). Each series has an id from its contributor's
 * StateReporter: the primary learns its labels once and finds it by id after.
 */
interface FamilyReport {
  readonly name: string
  /** With the family's first report from this reporter (and every full one). */
  readonly def?: FamilyDef
  /** Every series of the family, numbered again: they replace the contributor's parts (as a full report does). */
  readonly whole?: true
  /** The label values of series sent for the first time (`labelNames.length` each), ids `first`, `first + 1`, … */
  readonly first: number
  readonly labels: readonly string[]
  /**
   * The report's figures (one typed array for every family: one structured clone), this family's from `at` to `end`:
   * per series, its id, then its value (counter, gauge), or its state's length and the state (histogram, state.ts),
   * or minus the number of figures and the observations since its last report as value, weight pairs (a histogram
   * whose last state the primary holds, while they are few: HistogramSeries#since).
   */
  readonly data: Float64Array
  readonly at: number
  readonly end: number
  /** A histogram's exemplars per classic slot, by series id (only series that have some). */
  readonly exemplars?: readonly (readonly [number, readonly (Exemplar | undefined)[]])[]
}

export interface WorkerMetrics {
  readonly families: readonly FamilyReport[]
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

function defOf(m: OwnMetric): FamilyDef {
  const base = { help: m.help, labelNames: m.labelNames }
  if (m instanceof Histogram)
    return { ...base, type: 'histogram', buckets: m.buckets, ...(m.native === undefined ? {} : { native: m.native }) }
  return { ...base, type: m.type }
}

/** A family in the report being written: where its figures are, until they are copied out. */
interface Written {
  readonly m: OwnMetric
  readonly def: FamilyDef | undefined
  readonly whole: boolean
  readonly first: number
  readonly labels: readonly string[]
  readonly at: number
  readonly end: number
  readonly exemplars: [number, readonly (Exemplar | undefined)[]][] | undefined
}

/**
 * Worker side: only the series that changed since the report the primary applied last (`applied`; each family lists
 * its changed series as they change, so a report costs what changed, not a scan of every series), else every series
 * (a lost report, the first one). One reporter a family: it takes the family's list of changes, and numbers its
 * series on the series themselves (`reportId`); a family another reporter took over is numbered again and sent whole.
 */
export class StateReporter {
  #seq = 0
  /** Each family's next series id, as the primary knows them (every family starts over with a full report). */
  #next = new WeakMap<object, number>()
  /** Where a report's figures are written, then copied out at their length (grown as needed, kept). */
  #scratch = new Float64Array(4096)

  report(
    families: readonly OwnMetric[],
    applied: number | undefined,
  ): Pick<WorkerMetrics, 'families' | 'seq' | 'base'> {
    const full = applied !== this.#seq
    if (full) this.#next = new WeakMap()
    const written: Written[] = []
    let at = 0
    for (const m of families) {
      const w = this.#family(m, full, at)
      if (w === undefined) continue
      written.push(w)
      at = w.end
    }
    // One typed array for the whole report: one structured clone.
    const data = this.#scratch.slice(0, at)
    const out = written.map(
      (w): FamilyReport => ({
        name: w.m.name,
        ...(w.def === undefined ? {} : { def: w.def }),
        ...(w.whole ? { whole: true } : {}),
        first: w.first,
        labels: w.labels,
        data,
        at: w.at,
        end: w.end,
        ...(w.exemplars === undefined ? {} : { exemplars: w.exemplars }),
      }),
    )
    const base = full ? undefined : this.#seq
    return { families: out, seq: ++this.#seq, base }
  }

  /** A family's changed series (every one when `full` or taken over) written from `at`; undefined: nothing to send. */
  #family(m: OwnMetric, full: boolean, at: number): Written | undefined {
    const described = this.#next.has(m)
    // Another reader numbered this family's series since: they are numbered again and replace this reporter's parts.
    const whole = !full && described && !m.trackedBy(this)
    let series: readonly (HistogramSeries | CounterSeries | GaugeSample)[]
    if (m instanceof CollectedGauge) series = m.takeChangedValues(this, full)
    else {
      const changed: readonly (HistogramSeries | CounterSeries)[] | undefined = full
        ? undefined
        : (m as Metric<HistogramSeries | CounterSeries>).takeChanged(this)
      series = changed ?? this.#every(m as Metric<HistogramSeries | CounterSeries>)
    }
    if (described && !whole && series.length === 0) return undefined
    const renumber = full || whole || !described
    const first = renumber ? 0 : (this.#next.get(m) as number)
    let next = first
    const labels: string[] = []
    const from = at
    let exemplars: [number, readonly (Exemplar | undefined)[]][] | undefined
    const histogram = m instanceof Histogram
    for (const s of series) {
      let id = s.reportId
      if (renumber || id < 0) {
        id = next++
        s.reportId = id
        for (const v of s.labelValues) labels.push(v)
      }
      if (histogram) {
        const h = s as HistogramSeries
        const since = h.since
        // The observations since its last report (a few), when the primary holds that state at this schema.
        if (!renumber && h.logging && since !== undefined && h.core.schema === h.sinceSchema) {
          if (at + 2 + since.length > this.#scratch.length) this.#grow(at + 2 + since.length)
          const data = this.#scratch
          data[at] = id
          data[at + 1] = -since.length
          for (let i = 0; i < since.length; i++) data[at + 2 + i] = since[i]
          at += 2 + since.length
        } else {
          const length = stateLength(h.core)
          if (at + 2 + length > this.#scratch.length) this.#grow(at + 2 + length)
          const data = this.#scratch
          data[at] = id
          const end = writeState(h.core, data, at + 2)
          data[at + 1] = end - at - 2
          at = end
        }
        h.logging = true
        h.since = undefined
        h.sinceSchema = h.core.schema
        if (h.exemplars === undefined) continue
        exemplars ??= []
        exemplars.push([id, [...h.exemplars]])
      } else {
        if (at + 2 > this.#scratch.length) this.#grow(at + 2)
        this.#scratch[at] = id
        this.#scratch[at + 1] = (s as CounterSeries | GaugeSample).value
        at += 2
      }
    }
    this.#next.set(m, next)
    return { m, def: described ? undefined : defOf(m), whole, first, labels, at: from, end: at, exemplars }
  }

  #grow(length: number): void {
    const grown = new Float64Array(Math.max(length, 2 * this.#scratch.length))
    grown.set(this.#scratch)
    this.#scratch = grown
  }

  /** Every series of a family, tracked for this reporter from now on. */
  #every<S extends Tracked>(m: Metric<S>): readonly S[] {
    m.trackChanges(this)
    return [...m.entries()]
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
  from: number
  readonly slot: Slot
  /** The slot's merged series, held here too: applying a report reads the part, then the series, not the slot between. */
  readonly series: HistogramSeries | CounterSeries | undefined
  /** The series' labels as its contributor sent them (the group's fold may merge several into one). */
  readonly raw: readonly string[]
  readonly rawKey: string
  /** A counter's or gauge's value. */
  value: number
  /**
   * A histogram's figures (state.ts): the first `length` of `state`, which has room to grow (a changed part is copied
   * in place, not allocated; read in place, not through a view).
   */
  state: CoreState | undefined
  length: number
  exemplars: readonly (Exemplar | undefined)[] | undefined
  /** Requests of llm_requests_total the group's budget folded into this series (they count in FOLDED_FAMILY). */
  folded: number
}

interface Slot {
  readonly key: string
  readonly labels: readonly string[]
  readonly parts: Part[]
  /** The merged series (histogram, counter). */
  readonly series: HistogramSeries | CounterSeries | undefined
}

/**
 * A merged family kept between scrapes: each contributor's part of every series, found by the contributor's series
 * id. A changed histogram part adds only its buckets' increase to the merged series (state.ts, `addIncrease`); a
 * series is merged again from all its parts when that cannot be done (a part's schema lowered, a full report).
 */
class LiveFamily {
  readonly metric: OwnMetric
  readonly #slots = new Map<string, Slot>()
  /** Each contributor's parts by its series ids. */
  readonly #tables = new Map<number, (Part | undefined)[]>()
  readonly #gauge = new Map<string, number>()
  /** Slots that have had requests folded by the group's budget (`folded`). */
  readonly #foldedSlots = new Set<Slot>()
  readonly #bounds: Float64Array | undefined

  constructor(name: string, def: FamilyDef) {
    const opts = { name, help: def.help, labelNames: def.labelNames }
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

  /** A contributor's report of this family, mapped by the group's fold; a full one replaces all the contributor's parts. */
  apply(from: number, report: FamilyReport, full: boolean, fold?: SeriesMapper, pass?: FoldPass): void {
    const dirty = new Set<Slot>()
    let table = this.#tables.get(from)
    if (full && table !== undefined) {
      for (const p of table) if (p !== undefined) this.#remove(p, dirty)
      table = undefined
    }
    if (table === undefined) {
      table = []
      this.#tables.set(from, table)
    }
    const width = this.metric.labelNames.length
    const histogram = this.metric instanceof Histogram
    const counts = pass !== undefined && this.metric.name === 'llm_requests_total'
    const data = report.data
    let at = report.at
    while (at < report.end) {
      const id = data[at]
      // A histogram's state is figures `state` to `at` of the report's (read in place).
      let state = -1
      let value = 0
      let observations = false
      if (histogram) {
        let length = data[at + 1]
        if (length < 0) {
          observations = true
          length = -length
        }
        if (!((observations ? length % 2 === 0 : length > CORE_STATE_MIN) && at + 2 + length <= report.end))
          throw new Error(`${this.metric.name}: series ${id} of contributor ${from} has a state of ${length} figures`)
        state = at + 2
        at = state + length
      } else {
        value = data[at + 1]
        at += 2
      }
      let part: Part | undefined = table[id]
      let added = false
      if (part === undefined) {
        const k = id - report.first
        if (!(k >= 0 && (k + 1) * width <= report.labels.length))
          throw new Error(`${this.metric.name}: series ${id} of contributor ${from} came without its labels`)
        part = this.#part(from, report.labels.slice(k * width, (k + 1) * width), fold)
        table[id] = part
        added = true
      }
      const slot = part.slot
      if (counts && fold !== undefined) {
        const before = foldedTotal(pass)
        fold(part.raw, value)
        part.folded = foldedTotal(pass) - before
        if (part.folded > 0) this.#foldedSlots.add(slot)
      }
      if (state < 0) {
        part.value = value
        this.#merge(slot)
        continue
      }
      const prev = part.state
      const series = part.series as HistogramSeries
      if (observations) {
        if (prev === undefined)
          throw new Error(`${this.metric.name}: series ${id} of contributor ${from} sent observations before its state`)
        const merged = dirty.size === 0 || !dirty.has(slot)
        observeState(part, data, state, at, this.#bounds, merged ? series.core : undefined)
        if (merged) invalidate(series)
        continue
      }
      if (dirty.size === 0 || !dirty.has(slot)) {
        if (added) addState(series.core, data, state, at)
        else if (prev === undefined || !addIncrease(series.core, prev, part.length, data, state, at)) dirty.add(slot)
        invalidate(series)
      }
      keep(part, data, state, at)
    }
    for (const [id, exemplars] of report.exemplars ?? []) {
      const part = table[id]
      if (part === undefined) continue
      part.exemplars = exemplars
      const series = part.series as HistogramSeries
      if (dirty.has(part.slot)) continue
      series.exemplars ??= new Array<Exemplar | undefined>(series.counts.length).fill(undefined)
      mergeExemplars(series.exemplars, exemplars)
    }
    for (const slot of dirty) this.#merge(slot)
  }

  /** A new part of contributor `from`, in the slot its labels map to. */
  #part(from: number, raw: readonly string[], fold: SeriesMapper | undefined): Part {
    const rawKey = raw.join('\u0000')
    const labels = fold === undefined ? raw : fold(raw, undefined)
    const slot = this.#slot(labels === raw ? rawKey : labels.join('\u0000'), labels)
    const part: Part = {
      from,
      slot,
      series: slot.series,
      raw,
      rawKey,
      value: 0,
      state: undefined,
      length: 0,
      exemplars: undefined,
      folded: 0,
    }
    slot.parts.push(part)
    return part
  }

  #slot(key: string, labels: readonly string[]): Slot {
    let slot = this.#slots.get(key)
    if (slot === undefined) {
      const m = this.metric
      const series = m instanceof CollectedGauge ? undefined : m.labels(...labels)
      if (m instanceof CollectedGauge) m.touch(labels)
      slot = { key, labels, parts: [], series }
      this.#slots.set(key, slot)
    }
    return slot
  }

  #remove(part: Part, dirty: Set<Slot>): void {
    const parts = part.slot.parts
    const i = parts.indexOf(part)
    if (i >= 0) parts.splice(i, 1)
    dirty.add(part.slot)
  }

  /** Requests the group's budget folded, by the overflow series they went to (labels by name). */
  folded(): Map<string, { labels: Record<string, string>; count: number }> {
    const out = new Map<string, { labels: Record<string, string>; count: number }>()
    for (const slot of this.#foldedSlots) {
      let n = 0
      for (const p of slot.parts) n += p.folded
      if (n === 0) continue
      const labels: Record<string, string> = {}
      this.metric.labelNames.forEach((name, i) => {
        labels[name] = slot.labels[i]
      })
      out.set(slot.key, { labels, count: n })
    }
    return out
  }

  /** The total of a counter family's series, parts of contributor `except` left out. */
  total(except: number): number {
    let n = 0
    for (const slot of this.#slots.values()) for (const p of slot.parts) if (p.from !== except) n += p.value
    return n
  }

  /** Sets contributor `from`'s value of the series with these labels (a counter the primary adds to). */
  set(from: number, labels: readonly string[], value: number): void {
    const key = labels.join('\u0000')
    const slot = this.#slot(key, labels)
    const part = slot.parts.find((p) => p.from === from)
    if (part === undefined)
      slot.parts.push({
        from,
        slot,
        series: slot.series,
        raw: labels,
        rawKey: key,
        value,
        state: undefined,
        length: 0,
        exemplars: undefined,
        folded: 0,
      })
    else part.value = value
    this.#merge(slot)
  }

  /** A dead contributor's counts move into the dead workers' part (the sums stay as they are); its gauges go. */
  retire(from: number): void {
    const table = this.#tables.get(from)
    if (table === undefined) return
    this.#tables.delete(from)
    for (const part of table) {
      if (part === undefined) continue
      const slot = part.slot
      if (this.metric.type === 'gauge') {
        this.#remove(part, new Set())
        this.#merge(slot)
        continue
      }
      const dead = slot.parts.find((p) => p.from === DEAD && p.rawKey === part.rawKey)
      if (dead === undefined) {
        part.from = DEAD
        continue
      }
      slot.parts.splice(slot.parts.indexOf(part), 1)
      dead.value += part.value
      dead.folded += part.folded
      if (dead.state !== undefined && part.state !== undefined) {
        const core = coreFromState(dead.state.subarray(0, dead.length), this.#bounds)
        addState(core, part.state, 0, part.length)
        const state = coreState(core)
        keep(dead, state, 0, state.length)
      }
      if (part.exemplars !== undefined) {
        const into = [...(dead.exemplars ?? new Array<Exemplar | undefined>(part.exemplars.length).fill(undefined))]
        mergeExemplars(into, part.exemplars)
        dead.exemplars = into
      }
    }
  }

  /** A series merged again from all its parts. */
  #merge(slot: Slot): void {
    const m = this.metric
    if (m instanceof Histogram) {
      const series = slot.series as HistogramSeries
      series.core.clear()
      let exemplars: (Exemplar | undefined)[] | undefined
      for (const p of slot.parts) {
        if (p.state !== undefined) addState(series.core, p.state, 0, p.length)
        if (p.exemplars === undefined) continue
        exemplars ??= new Array<Exemplar | undefined>(series.counts.length).fill(undefined)
        mergeExemplars(exemplars, p.exemplars)
      }
      series.exemplars = exemplars
      invalidate(series)
      return
    }
    let value = 0
    for (const p of slot.parts) value += p.value
    if (m instanceof Counter) (slot.series as CounterSeries).value = value
    else {
      this.#gauge.set(slot.key, value)
      m.touch(slot.labels)
    }
  }
}

/** A merged series' rendered forms go: it is rendered again at the next scrape. */
function invalidate(series: HistogramSeries): void {
  series.exposition = undefined
  series.expositionWithExemplars = undefined
  series.protobuf = undefined
}

/** Slots a kept state grows by beyond its length (a few more buckets before it moves). */
const STATE_ROOM = 8

/** A copy of figures `at` to `end` of `data` kept as `part`'s state, in its room when it fits. */
function keep(part: Part, data: Float64Array, at: number, end: number): void {
  const length = end - at
  let room = part.state
  if (room === undefined || room.length < length) {
    room = new Float64Array(length + STATE_ROOM)
    part.state = room
  }
  // Copied figure by figure: a view to copy from (`subarray`) costs more than the copy.
  for (let i = 0; i < length; i++) room[i] = data[at + i]
  part.length = length
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
    // A family the primary has not seen comes with its definition (else this report cannot be read: a full one next).
    if (report.families.some((f) => f.def === undefined && !this.#families.has(f.name))) return false
    const pass = this.#options.fold?.pass()
    for (const state of report.families) {
      let f = this.#families.get(state.name)
      if (f === undefined) {
        f = new LiveFamily(state.name, state.def as FamilyDef)
        this.#families.set(state.name, f)
        this.#registry.register(f.metric)
      }
      f.apply(from, state, full || state.whole === true, pass?.family(state.name, f.metric.labelNames), pass)
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
