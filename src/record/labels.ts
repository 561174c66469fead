/**
 * The labels of every llm_ series in one place: value caps, the label-set budget and the one cache of label sets; a
 * user-controlled value is bounded so a flood of names cannot grow the scrape (docs/metrics.md, "Label caps and the series budget").
 */

export const OTHER = 'other'
export const UNKNOWN = 'unknown'

/** Longest label value kept; longer model names are cut (they are still one value each). */
export const MAX_VALUE_LENGTH = 128

/** The label names of every llm_ series, in the order of `LabelSet.values`. */
export const SERIES_LABELS = ['provider', 'model', 'route'] as const

/** The optional label every llm_ series carries after SERIES_LABELS with `metrics.tenant` on. */
const TENANT_LABEL = 'tenant'

export interface SeriesLabels {
  readonly provider: string
  readonly model: string
  readonly route: string
  /** With `metrics.tenant` on: the request's tenant (record/tenant.ts). */
  readonly tenant?: string
}

/** Output-length bands (`length_band`): short < 64, medium < 512, long ≥ 512 output tokens. */
export const LENGTH_BANDS = [
  { name: 'short', below: 64 },
  { name: 'medium', below: 512 },
  { name: 'long', below: Number.POSITIVE_INFINITY },
] as const

/** The index in LENGTH_BANDS of a request with this many output tokens. */
export function lengthBandOf(outputTokens: number): number {
  return outputTokens < LENGTH_BANDS[0].below ? 0 : outputTokens < LENGTH_BANDS[1].below ? 1 : 2
}

/** Input-length bands (`input_length_band`) in binary thousands as context windows are named; `unknown` when none was reported. */
export const INPUT_LENGTH_BANDS = [
  { name: 'lt_1k', below: 1024 },
  { name: 'lt_8k', below: 8192 },
  { name: 'lt_32k', below: 32_768 },
  { name: 'lt_128k', below: 131_072 },
  { name: 'ge_128k', below: Number.POSITIVE_INFINITY },
  { name: 'unknown', below: Number.NaN },
] as const

/** The index in INPUT_LENGTH_BANDS of a request with this many reported input tokens (undefined: unknown). */
export function inputLengthBandOf(inputTokens: number | undefined): number {
  if (inputTokens === undefined) return INPUT_LENGTH_BANDS.length - 1
  let i = 0
  while (inputTokens >= INPUT_LENGTH_BANDS[i].below) i++
  return i
}

/** Distinct values admitted per scope up to a cap, then `other`; `free` values pass uncounted, and an admitted value stays, so a series never renames. */
export class ScopedCap {
  readonly #max: number
  readonly #free: ReadonlySet<string>
  readonly #seen = new Map<string, Set<string>>()

  constructor(max: number, free: readonly string[] = []) {
    this.#max = max
    this.#free = new Set(free)
  }

  value(scope: string, value: string): string {
    if (this.#free.has(value)) return value
    let set = this.#seen.get(scope)
    if (set === undefined) {
      set = new Set()
      this.#seen.set(scope, set)
    }
    if (set.has(value)) return value
    if (set.size >= this.#max) return OTHER
    set.add(value)
    return value
  }
}

/** A model label: `unknown` when none was named, cut to MAX_VALUE_LENGTH, then capped per scope (the route). */
function modelValue(cap: ScopedCap, scope: string, raw: string | undefined): string {
  if (raw === undefined || raw.length === 0) return UNKNOWN
  return cap.value(scope, raw.length > MAX_VALUE_LENGTH ? raw.slice(0, MAX_VALUE_LENGTH) : raw)
}

/** A bound on distinct label sets (`limits.max_label_sets`), in arrival order; the overflow set is never counted. */
export class LabelSetBudget {
  readonly #max: number
  readonly #admitted = new Set<string>()

  constructor(max: number) {
    this.#max = max
  }

  /** Whether the set of `key` is (now) admitted. */
  admit(key: string): boolean {
    if (this.#admitted.has(key)) return true
    if (this.#admitted.size >= this.#max) return false
    this.#admitted.add(key)
    return true
  }
}

/** A label set's key: its values joined by NUL, as the families key their series. */
export const labelKey = (provider: string, model: string, route: string, tenant: string | undefined): string =>
  tenant === undefined
    ? `${provider}\u0000${model}\u0000${route}`
    : `${provider}\u0000${model}\u0000${route}\u0000${tenant}`

/** Label values and their key, made with an extra label's value appended (or the same ones with the label off). */
export interface BandedValues {
  readonly values: readonly string[]
  readonly key: string
}

/** One label set, made once: its labels, values, key, banded values and a slot per sink, so a request looks its series up once. */
export class LabelSet {
  readonly labels: SeriesLabels
  /** The values of the policy's label names (SERIES_LABELS, then `tenant` when on). */
  readonly values: readonly string[]
  readonly key: string
  /** Beyond the label-set budget: these are the overflow set's values (llm_label_sets_folded_total). */
  readonly folded: boolean
  /** By length band: the values with the band appended (or the same values with the label off). */
  readonly banded: readonly BandedValues[]
  /** By input-length band, the same way. */
  readonly inputBanded: readonly BandedValues[]
  /** What each sink bound to this set (LabelSlot). */
  readonly slots: unknown[] = []

  constructor(
    provider: string,
    model: string,
    route: string,
    tenant: string | undefined,
    folded: boolean,
    bands: { readonly length: boolean; readonly input: boolean },
  ) {
    const key = labelKey(provider, model, route, tenant)
    const values = tenant === undefined ? [provider, model, route] : [provider, model, route, tenant]
    this.labels = tenant === undefined ? { provider, model, route } : { provider, model, route, tenant }
    this.values = values
    this.key = key
    this.folded = folded
    this.banded = LENGTH_BANDS.map((b) =>
      bands.length ? { values: [...values, b.name], key: `${key}\u0000${b.name}` } : { values, key },
    )
    this.inputBanded = INPUT_LENGTH_BANDS.map((b) =>
      bands.input ? { values: [...values, b.name], key: `${key}\u0000${b.name}` } : { values, key },
    )
  }
}

let slots = 0

/** A sink's place on every LabelSet: what it bound to the set, typed. */
export class LabelSlot<T> {
  readonly #index = slots++

  get(set: LabelSet): T | undefined {
    return set.slots[this.#index] as T | undefined
  }

  put(set: LabelSet, value: T): T {
    set.slots[this.#index] = value
    return value
  }
}

export interface LabelOptions {
  readonly maxModelsPerRoute: number
  /** `limits.max_label_sets` (default: no bound). */
  readonly maxLabelSets?: number
  /** Called once, the first time a label set is folded by the budget (the one warn line). */
  readonly onFirstFold?: () => void
  /** `metrics.length_band_label`: ITL and TPOT series carry `length_band`. */
  readonly lengthBandLabel: boolean
  /** `metrics.input_length_band_label`: TTFT and E2E series carry `input_length_band`. */
  readonly inputLengthBandLabel?: boolean
  /** `metrics.tenant` is on: every series carries `tenant` after SERIES_LABELS. */
  readonly tenant?: boolean
}

/** Label sets kept for reuse; past this many the cache starts over (the label bound keeps the real count small). */
const LABEL_CACHE = 10_000

/** The label sets of one process: the caps, the budget and the one cache. Requests and realtime sessions share it. */
export class Labels {
  readonly #models: ScopedCap
  readonly #options: LabelOptions
  readonly #budget: LabelSetBudget
  readonly #sets = new Map<string, LabelSet>()
  readonly #bands: { readonly length: boolean; readonly input: boolean }
  #folded = false

  constructor(options: LabelOptions) {
    this.#options = options
    this.#models = new ScopedCap(options.maxModelsPerRoute)
    this.#budget = new LabelSetBudget(options.maxLabelSets ?? Number.POSITIVE_INFINITY)
    this.#bands = { length: options.lengthBandLabel, input: options.inputLengthBandLabel === true }
  }

  /** The label names of every llm_ series, in the order of `LabelSet.values`: SERIES_LABELS, plus `tenant` when on. */
  get names(): readonly string[] {
    return this.#options.tenant === true ? [...SERIES_LABELS, TENANT_LABEL] : SERIES_LABELS
  }

  /** The label names of the TTFT and E2E series (`names`, plus `input_length_band` when on; E2E adds `outcome`). */
  get inputBandedNames(): readonly string[] {
    return this.#bands.input ? [...this.names, 'input_length_band'] : this.names
  }

  /** The label names of the ITL and TPOT series (`names`, plus `length_band` when on). */
  get bandedNames(): readonly string[] {
    return this.#bands.length ? [...this.names, 'length_band'] : this.names
  }

  /** A model label value bounded per scope (a route; the response model has a scope of its own). */
  model(scope: string, raw: string | undefined): string {
    return modelValue(this.#models, scope, raw)
  }

  /** The label set of a request or session (admits its model while the route has room, its set while the budget has). */
  of(provider: string, route: string, model: string | undefined, tenant: string | undefined): LabelSet {
    const m = this.model(route, model)
    const t = this.#options.tenant === true ? (tenant ?? 'none') : undefined
    const key = labelKey(provider, m, route, t)
    let set = this.#sets.get(key)
    if (set === undefined) {
      // A set once admitted stays so and one once folded stays folded (the budget, once full, stays full).
      const overflow = m === OTHER && (t === undefined || t === OTHER)
      set =
        overflow || this.#budget.admit(key)
          ? new LabelSet(provider, m, route, t, false, this.#bands)
          : new LabelSet(provider, OTHER, route, t === undefined ? undefined : OTHER, true, this.#bands)
      if (set.folded && !this.#folded) {
        this.#folded = true
        this.#options.onFirstFold?.()
      }
      if (this.#sets.size >= LABEL_CACHE) this.#sets.clear()
      this.#sets.set(key, set)
    }
    return set
  }
}
