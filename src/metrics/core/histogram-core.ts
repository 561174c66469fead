/**
 * The one histogram of tokentap: sparse exponential buckets as Prometheus native histograms and
 * OpenTelemetry exponential histograms define them, weighted observations, mergeable, with a
 * bounded number of buckets; optionally the counts of classic (explicit) buckets beside them.
 * The Prometheus families, the OTLP export and the live page's sliding windows all keep their
 * figures in it, each at the resolution it needs. Pure: no clock, no I/O.
 *
 * Exponential buckets (https://prometheus.io/docs/specs/native_histograms/#schema): at schema s
 * the base is 2^(2^−s) and bucket i holds the values in (base^(i−1), base^i]; values whose
 * magnitude is at most the zero threshold count in the zero bucket. Schema 3 keeps any quantile
 * within about 4.4 % (half a bucket's width), 6 within 0.55 %. Past `maxBuckets` populated
 * buckets the resolution is lowered (schema − 1 merges each pair of buckets), as the Prometheus
 * clients do, so no input grows a series without bound.
 *
 * Classic buckets cannot be derived from exponential ones whose edges do not meet the configured
 * bounds, so they are counted exactly beside them (le inclusive, the last slot +Inf).
 */

/** Schemas Prometheus accepts (OpenTelemetry's scale has a wider range; tokentap stays in this one). */
const MIN_SCHEMA = -4
const MAX_SCHEMA = 8
/** Prometheus's default zero threshold (client_golang's DefNativeHistogramZeroThreshold): only 0 itself, in practice. */
const DEFAULT_ZERO_THRESHOLD = 2 ** -128
/** Prometheus's suggested bucket limit a series (client_golang's NativeHistogramMaxBucketNumber examples, and OTel's default max size). */
const DEFAULT_MAX_BUCKETS = 160
/**
 * Buckets are kept dense between the lowest and highest populated one; a range wider than this
 * many times the bucket limit lowers the resolution too, so a few values far apart cannot make
 * the array large.
 */
const SPAN_FACTOR = 8
/** Slots added on each side when the dense range grows, so a series settles after a few growths. */
const SLACK = 8

export interface HistogramCoreOptions {
  /** Exponential buckets at this schema (MIN_SCHEMA … MAX_SCHEMA); undefined: classic buckets only. */
  readonly schema?: number
  /** Values of magnitude up to this count in the zero bucket. */
  readonly zeroThreshold?: number
  /** At most this many populated exponential buckets (0: no bound but the range's). */
  readonly maxBuckets?: number
  /** Classic upper bounds, ascending and finite (le inclusive; +Inf is implied). */
  readonly bounds?: Float64Array
}

/** The exponential bucket of `value` (> 0) at `schema`: the i with base^(i−1) < value ≤ base^i. */
export function bucketIndex(value: number, schema: number): number {
  // log2 is exact on powers of two, so the edges Prometheus and OTel agree on exactly stay exact.
  const v = Math.min(value, Number.MAX_VALUE)
  return Math.ceil(Math.log2(v) * 2 ** schema)
}

/** The upper edge base^i of exponential bucket `index` at `schema`. */
export function bucketUpper(index: number, schema: number): number {
  return 2 ** (index * 2 ** -schema)
}

/** The index of bucket `index` at `schema` once the resolution is lowered by `by` steps. */
const coarser = (index: number, by: number): number => -(-index >> by)

/**
 * A HistogramCore's figures as plain data (JSON and structured-clone safe): what a cluster worker
 * sends its primary. `buckets` holds pairs: index, count, … ascending.
 */
export interface HistogramState {
  /** Undefined: classic buckets only. */
  readonly schema?: number
  readonly zeroThreshold: number
  readonly count: number
  readonly sum: number
  readonly zeroCount: number
  /** Undefined when empty (JSON has no infinities). */
  readonly min?: number
  readonly max?: number
  readonly buckets: readonly number[]
  /** Non-cumulative classic counts, the last slot +Inf. */
  readonly classic?: readonly number[]
}

export class HistogramCore {
  /** Current schema (lowered past the bucket limit); undefined when only classic buckets are kept. */
  schema: number | undefined
  readonly zeroThreshold: number
  readonly maxBuckets: number
  /** Classic bounds and their non-cumulative counts (the last slot is +Inf), when configured. */
  readonly bounds: Float64Array | undefined
  readonly classic: Float64Array | undefined
  count = 0
  sum = 0
  zeroCount = 0
  min = Number.POSITIVE_INFINITY
  max = Number.NEGATIVE_INFINITY
  /** Dense counts of buckets `lo` … `lo + counts.length − 1` (undefined until the first value outside the zero bucket). */
  #counts: Float64Array | undefined
  #lo = 0
  /** Non-zero slots of #counts. */
  #populated = 0

  constructor(options: HistogramCoreOptions) {
    const schema = options.schema
    if (schema !== undefined && !(Number.isInteger(schema) && schema >= MIN_SCHEMA && schema <= MAX_SCHEMA)) throw new RangeError(`schema ${schema}: an integer from ${MIN_SCHEMA} to ${MAX_SCHEMA}`)
    this.schema = schema
    this.zeroThreshold = options.zeroThreshold ?? DEFAULT_ZERO_THRESHOLD
    this.maxBuckets = options.maxBuckets ?? DEFAULT_MAX_BUCKETS
    this.bounds = options.bounds
    this.classic = options.bounds === undefined ? undefined : new Float64Array(options.bounds.length + 1)
  }

  /** An empty histogram with the same settings (its schema as configured, not as lowered). */
  static like(h: HistogramCore, schema = h.schema): HistogramCore {
    return new HistogramCore({ schema, zeroThreshold: h.zeroThreshold, maxBuckets: h.maxBuckets, bounds: h.bounds })
  }

  /** Populated exponential buckets (the zero bucket not included). */
  get bucketCount(): number {
    return this.#populated
  }

  /** Bytes of bucket storage held (typed arrays only). */
  get byteLength(): number {
    return (this.#counts?.byteLength ?? 0) + (this.classic?.byteLength ?? 0)
  }

  /**
   * Records `weight` observations of `value` (a run of equal values at once); returns the classic
   * slot it counted in, or -1 when nothing was recorded (NaN, a weight that is not positive).
   */
  observe(value: number, weight = 1): number {
    if (!(weight > 0) || Number.isNaN(value)) return -1
    this.count += weight
    this.sum += value * weight
    if (value < this.min) this.min = value
    if (value > this.max) this.max = value
    const schema = this.schema
    if (schema !== undefined) {
      if (value <= this.zeroThreshold && value >= -this.zeroThreshold) this.zeroCount += weight
      // tokentap's figures are never negative (durations, counts, ratios): one below the zero
      // bucket would be an error upstream of here, and is counted in it rather than lost.
      else if (value < 0) this.zeroCount += weight
      else this.#add(bucketIndex(value, schema), weight)
    }
    const bounds = this.bounds
    if (bounds === undefined) return 0
    // Smallest bound ≥ value (le is inclusive).
    let lo = 0
    let hi = bounds.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (bounds[mid] < value) lo = mid + 1
      else hi = mid
    }
    ;(this.classic as Float64Array)[lo] += weight
    return lo
  }

  /**
   * `observe` for a histogram without classic buckets, with the bucket already found by the
   * caller (one logarithm for several histograms): `index` is `bucketIndex(value, schema)`, or
   * −∞ for a value in the zero bucket. An index finer than this histogram's schema is mapped down.
   */
  observeIndexed(value: number, weight: number, index: number, schema: number): void {
    if (!(weight > 0) || Number.isNaN(value)) return
    this.count += weight
    this.sum += value * weight
    if (value < this.min) this.min = value
    if (value > this.max) this.max = value
    if (index === Number.NEGATIVE_INFINITY) this.zeroCount += weight
    else this.#add(coarser(index, schema - (this.schema as number)), weight)
  }

  #add(index: number, weight: number): void {
    let counts = this.#counts
    let slot = index - this.#lo
    if (counts === undefined || slot < 0 || slot >= counts.length) {
      // Covering a far index may lower the schema: the index moves with it.
      const lowered = this.#cover(index)
      counts = this.#counts as Float64Array
      slot = coarser(index, lowered) - this.#lo
    }
    if (counts[slot] === 0) {
      this.#populated++
      counts[slot] = weight
      if (this.#populated > this.maxBuckets && this.maxBuckets > 0) this.#fit()
      return
    }
    counts[slot] += weight
  }

  /**
   * Makes the dense range cover `index`, first lowering the resolution while the range would
   * grow wider than the bucket limit allows; returns by how many steps it was lowered.
   */
  #cover(index: number): number {
    const old = this.#counts
    if (old === undefined) {
      this.#lo = index - SLACK
      this.#counts = new Float64Array(2 * SLACK + 1)
      return 0
    }
    const limit = this.maxBuckets > 0 ? this.maxBuckets * SPAN_FACTOR : Number.POSITIVE_INFINITY
    let lowered = 0
    for (;;) {
      const at = coarser(index, lowered)
      const counts = this.#counts as Float64Array
      const lo = Math.min(this.#lo, at - SLACK)
      const hi = Math.max(this.#lo + counts.length, at + SLACK + 1)
      if (at >= this.#lo && at < this.#lo + counts.length) return lowered
      if (hi - lo > limit && (this.schema as number) > MIN_SCHEMA) {
        this.#lower(1)
        lowered++
        continue
      }
      const grown = new Float64Array(hi - lo)
      grown.set(counts, this.#lo - lo)
      this.#lo = lo
      this.#counts = grown
      return lowered
    }
  }

  /** Lowers the resolution until the populated buckets fit the limit. */
  #fit(): void {
    while (this.#populated > this.maxBuckets && (this.schema as number) > MIN_SCHEMA) this.#lower(1)
  }

  /** Lowers the schema by `by` steps: each bucket's count moves to the coarser bucket that holds it. */
  #lower(by: number): void {
    if (by <= 0) return
    const old = this.#counts
    const schema = (this.schema as number) - by
    this.schema = schema
    if (old === undefined) return
    const oldLo = this.#lo
    const lo = coarser(oldLo, by) - SLACK
    const hi = coarser(oldLo + old.length - 1, by) + SLACK + 1
    const counts = new Float64Array(hi - lo)
    let populated = 0
    for (let j = 0; j < old.length; j++) {
      const c = old[j]
      if (c === 0) continue
      const k = coarser(oldLo + j, by) - lo
      if (counts[k] === 0) populated++
      counts[k] += c
    }
    this.#lo = lo
    this.#counts = counts
    this.#populated = populated
  }

  /** Calls `visit(index, count)` for every populated exponential bucket, ascending (the zero bucket is `zeroCount`). */
  forEachBucket(visit: (index: number, count: number) => void): void {
    const counts = this.#counts
    if (counts === undefined) return
    const lo = this.#lo
    for (let j = 0; j < counts.length; j++) if (counts[j] !== 0) visit(lo + j, counts[j])
  }

  /** The count of bucket `index` (0 outside the populated range). */
  bucket(index: number): number {
    const counts = this.#counts
    const slot = index - this.#lo
    return counts === undefined || slot < 0 || slot >= counts.length ? 0 : counts[slot]
  }

  /** Lowest and highest populated bucket indexes, or undefined with none. */
  range(): { readonly lo: number; readonly hi: number } | undefined {
    const counts = this.#counts
    if (counts === undefined || this.#populated === 0) return undefined
    let a = 0
    while (counts[a] === 0) a++
    let b = counts.length - 1
    while (counts[b] === 0) b--
    return { lo: this.#lo + a, hi: this.#lo + b }
  }

  /**
   * Adds another histogram's observations (another worker's, or a sub-window's). The result
   * takes the lower of the two schemas; classic counts add slot by slot (same bounds expected).
   */
  merge(other: HistogramCore): void {
    this.#combine(other, 1)
  }

  /**
   * Takes another histogram's observations away (a sub-window leaving a sliding window that
   * holds it). Counts that float sums leave a hair above 0 are cleared.
   */
  subtract(other: HistogramCore): void {
    this.#combine(other, -1)
    if (this.count < 1e-9) this.clear()
  }

  #combine(other: HistogramCore, sign: 1 | -1): void {
    if (this.schema !== undefined && other.schema !== undefined && other.schema < this.schema) this.#lower(this.schema - other.schema)
    if (other.count === 0) return
    this.count += sign * other.count
    this.sum += sign * other.sum
    if (sign > 0) {
      if (other.min < this.min) this.min = other.min
      if (other.max > this.max) this.max = other.max
    }
    this.zeroCount += sign * other.zeroCount
    const classic = this.classic
    if (classic !== undefined && other.classic !== undefined) for (let i = 0; i < classic.length && i < other.classic.length; i++) classic[i] += sign * other.classic[i]
    if (this.schema === undefined || other.schema === undefined) return
    const from = other.#counts
    if (from === undefined) return
    const otherLo = other.#lo
    for (let j = 0; j < from.length; j++) {
      const c = from[j]
      if (c === 0) continue
      // Re-read each time: adding may lower this schema past the bucket limit.
      const index = coarser(otherLo + j, other.schema - (this.schema as number))
      if (sign > 0) {
        this.#add(index, c)
        continue
      }
      const counts = this.#counts
      const slot = index - this.#lo
      if (counts === undefined || slot < 0 || slot >= counts.length) continue
      const left = counts[slot] - c
      if (left < 1e-9) {
        if (counts[slot] !== 0) this.#populated--
        counts[slot] = 0
      } else counts[slot] = left
    }
  }

  /** This histogram's figures as plain data (`mergeHistogramState` adds them to another). */
  toState(): HistogramState {
    const buckets: number[] = []
    this.forEachBucket((index, c) => buckets.push(index, c))
    const empty = this.count === 0
    return {
      schema: this.schema,
      zeroThreshold: this.zeroThreshold,
      count: this.count,
      sum: this.sum,
      zeroCount: this.zeroCount,
      min: empty ? undefined : this.min,
      max: empty ? undefined : this.max,
      buckets,
      classic: this.classic === undefined ? undefined : Array.from(this.classic),
    }
  }

  /** A histogram holding `state` (with no bucket limit of its own: the one merged into applies its limit). */
  static fromState(state: HistogramState, bounds?: Float64Array): HistogramCore {
    const h = new HistogramCore({ schema: state.schema, zeroThreshold: state.zeroThreshold, maxBuckets: 0, bounds })
    h.count = state.count
    h.sum = state.sum
    h.zeroCount = state.zeroCount
    if (state.min !== undefined && state.min !== null) h.min = state.min
    if (state.max !== undefined && state.max !== null) h.max = state.max
    const b = state.buckets
    if (state.schema !== undefined) for (let i = 0; i + 1 < b.length; i += 2) h.#add(b[i], b[i + 1])
    const classic = h.classic
    if (classic !== undefined && state.classic !== undefined) for (let i = 0; i < classic.length && i < state.classic.length; i++) classic[i] = state.classic[i]
    return h
  }

  /** Forgets every observation (the configured schema stays as lowered). */
  clear(): void {
    this.#counts = undefined
    this.#populated = 0
    this.count = 0
    this.sum = 0
    this.zeroCount = 0
    this.min = Number.POSITIVE_INFINITY
    this.max = Number.NEGATIVE_INFINITY
    this.classic?.fill(0)
  }

  /**
   * The value a bucket stands for: 2·base^i / (base + 1), within (base − 1)/(base + 1) of every
   * value in it (the zero bucket stands for 0).
   */
  representative(index: number): number {
    const schema = this.schema as number
    const base = 2 ** (2 ** -schema)
    return (2 * bucketUpper(index, schema)) / (base + 1)
  }

  /**
   * Nearest-rank quantiles from the exponential buckets (the smallest bucket whose cumulative
   * count reaches q × count, as its representative), for ascending `qs`, into `out`; NaN when
   * empty. Quantiles up to the median walk from the bottom, the others from the top (a p99
   * passes ~1 % of the counts, not 99 %). A millionth of a count is allowed for float sums.
   */
  quantiles(qs: readonly number[], out: number[]): void {
    const n = qs.length
    const total = this.count
    if (!(total > 0) || this.schema === undefined) {
      for (let i = 0; i < n; i++) out[i] = Number.NaN
      return
    }
    const counts = this.#counts ?? EMPTY
    const lo = this.#lo
    let high = 0
    while (high < n && qs[high] <= 0.5) high++
    let q = 0
    if (q < high) {
      let rank = Math.max(1e-9, qs[0] * total)
      let seen = this.zeroCount
      while (q < high && seen >= rank - 1e-6) {
        out[q++] = 0
        if (q < high) rank = Math.max(1e-9, qs[q] * total)
      }
      let last = lo
      for (let j = 0; j < counts.length && q < high; j++) {
        if (counts[j] === 0) continue
        last = lo + j
        seen += counts[j]
        while (q < high && seen >= rank - 1e-6) {
          out[q++] = this.representative(lo + j)
          if (q < high) rank = Math.max(1e-9, qs[q] * total)
        }
      }
      for (; q < high; q++) out[q] = this.representative(last)
    }
    q = n - 1
    if (q < high) return
    let rank = Math.max(1e-9, qs[q] * total)
    let seen = total
    for (let j = counts.length - 1; j >= 0 && q >= high; j--) {
      if (counts[j] === 0) continue
      const below = seen - counts[j]
      while (q >= high && below < rank - 1e-6) {
        out[q--] = this.representative(lo + j)
        if (q >= high) rank = Math.max(1e-9, qs[q] * total)
      }
      seen = below
    }
    for (; q >= high; q--) out[q] = 0
  }
}

const EMPTY = new Float64Array(0)

/**
 * Adds a histogram's state (another process's, from `toState()`) to `into`, bucket by bucket:
 * when the schemas differ the result takes the lower one (each finer bucket goes to the coarser
 * bucket that holds it), and `into`'s bucket limit still holds afterwards. Classic counts add
 * slot by slot (the same bounds expected). What the cluster primary uses to serve its workers'
 * native histograms as one process would.
 */
export function mergeHistogramState(into: HistogramCore, state: HistogramState): void {
  into.merge(HistogramCore.fromState(state, into.bounds))
}
