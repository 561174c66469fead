import { Buckets } from './buckets.ts'
import { bucketIndex, bucketMidpoint, coarser, MAX_SCHEMA, MIN_SCHEMA } from './mapping.ts'

/**
 * The one histogram of tokentap: sparse exponential buckets as Prometheus native histograms and OpenTelemetry define
 * them (mapping.ts), weighted, mergeable and bounded (past `maxBuckets` the schema is lowered, as the Prometheus
 * clients do), plus exact classic buckets beside them, which exponential edges cannot reproduce. Pure.
 */

/** Prometheus's default zero threshold (client_golang's DefNativeHistogramZeroThreshold): only 0 itself, in practice. */
const DEFAULT_ZERO_THRESHOLD = 2 ** -128
/** Prometheus's suggested bucket limit a series (client_golang's NativeHistogramMaxBucketNumber examples, and OTel's default max size). */
const DEFAULT_MAX_BUCKETS = 160
/** A dense range wider than this many times the bucket limit lowers the resolution too, so far-apart values stay small. */
const SPAN_FACTOR = 8

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
  /** The exponential buckets (read by quantiles.ts; changed only here). */
  readonly buckets = new Buckets()

  constructor(options: HistogramCoreOptions) {
    const schema = options.schema
    if (schema !== undefined && !(Number.isInteger(schema) && schema >= MIN_SCHEMA && schema <= MAX_SCHEMA))
      throw new RangeError(`schema ${schema}: an integer from ${MIN_SCHEMA} to ${MAX_SCHEMA}`)
    this.schema = schema
    this.zeroThreshold = options.zeroThreshold ?? DEFAULT_ZERO_THRESHOLD
    this.maxBuckets = options.maxBuckets ?? DEFAULT_MAX_BUCKETS
    this.bounds = options.bounds
    this.classic = options.bounds === undefined ? undefined : new Float64Array(options.bounds.length + 1)
  }

  /** Populated exponential buckets (the zero bucket not included). */
  get bucketCount(): number {
    return this.buckets.populated
  }

  /** Bytes of bucket storage held (typed arrays only). */
  get byteLength(): number {
    return (this.buckets.counts?.byteLength ?? 0) + (this.classic?.byteLength ?? 0)
  }

  /** Records `weight` observations of `value`; returns the classic slot, or -1 when nothing was recorded (NaN, weight ≤ 0). */
  observe(value: number, weight = 1): number {
    if (!(weight > 0) || Number.isNaN(value)) return -1
    this.count += weight
    this.sum += value * weight
    if (value < this.min) this.min = value
    if (value > this.max) this.max = value
    const schema = this.schema
    if (schema !== undefined) {
      if (value <= this.zeroThreshold && value >= -this.zeroThreshold) this.zeroCount += weight
      // tokentap's figures are never negative: one below the zero bucket is counted in it rather than lost.
      else if (value < 0) this.zeroCount += weight
      else this.#add(bucketIndex(value, schema), weight)
    }
    const bounds = this.bounds
    if (bounds === undefined) return 0
    const slot = classicSlot(bounds, value)
    ;(this.classic as Float64Array)[slot] += weight
    return slot
  }

  /**
   * `observe` without classic buckets, the bucket found by the caller (one logarithm for several histograms): `index`
   * is `bucketIndex(value, schema)`, or −∞ for the zero bucket; a finer index is mapped down.
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

  /**
   * Adds `weight` to the exponential bucket holding `index` at `schema` (this core lowered to `schema` first when
   * finer); count, sum and the rest are the caller's (state.ts adds another core's figures this way).
   */
  addBucket(index: number, schema: number, weight: number): void {
    this.lowerTo(schema)
    this.#add(coarser(index, schema - (this.schema as number)), weight)
  }

  /** Lowers the schema to `schema` when it is finer (no-op with classic buckets only). */
  lowerTo(schema: number): void {
    if (this.schema !== undefined && schema < this.schema) this.#lower(this.schema - schema)
  }

  #add(index: number, weight: number): void {
    const buckets = this.buckets
    let added = buckets.increment(index, weight)
    // Covering a far index may lower the schema: the index moves with it.
    if (added < 0) added = buckets.increment(coarser(index, this.#cover(index)), weight)
    if (added === 1 && buckets.populated > this.maxBuckets && this.maxBuckets > 0) this.#fit()
  }

  /** Covers `index`, lowering the resolution while the range would outgrow the limit; returns the steps lowered. */
  #cover(index: number): number {
    const buckets = this.buckets
    if (buckets.counts === undefined) {
      buckets.cover(index)
      return 0
    }
    const limit = this.maxBuckets > 0 ? this.maxBuckets * SPAN_FACTOR : Number.POSITIVE_INFINITY
    let lowered = 0
    for (;;) {
      const at = coarser(index, lowered)
      if (buckets.covers(at)) return lowered
      if (buckets.widthWith(at) > limit && (this.schema as number) > MIN_SCHEMA) {
        this.#lower(1)
        lowered++
        continue
      }
      buckets.cover(at)
      return lowered
    }
  }

  /** Lowers the resolution until the populated buckets fit the limit. */
  #fit(): void {
    while (this.buckets.populated > this.maxBuckets && (this.schema as number) > MIN_SCHEMA) this.#lower(1)
  }

  /** Lowers the schema by `by` steps: each bucket's count moves to the coarser bucket that holds it. */
  #lower(by: number): void {
    if (by <= 0) return
    this.schema = (this.schema as number) - by
    this.buckets.downscale(by)
  }

  /** Calls `visit(index, count)` for every populated exponential bucket, ascending (the zero bucket is `zeroCount`). */
  forEachBucket(visit: (index: number, count: number) => void): void {
    this.buckets.forEach(visit)
  }

  /** The count of bucket `index` (0 outside the populated range). */
  bucket(index: number): number {
    return this.buckets.get(index)
  }

  /** Lowest and highest populated bucket indexes, or undefined with none. */
  range(): { readonly lo: number; readonly hi: number } | undefined {
    return this.buckets.range()
  }

  /** Adds another histogram's observations at the lower of the two schemas, so merging equals observing in one process. */
  merge(other: HistogramCore): void {
    this.#combine(other, 1)
  }

  /** Takes a sub-window's observations away; counts float sums leave a hair above 0 are cleared. */
  subtract(other: HistogramCore): void {
    this.#combine(other, -1)
    if (this.count < 1e-9) this.clear()
  }

  #combine(other: HistogramCore, sign: 1 | -1): void {
    if (this.schema !== undefined && other.schema !== undefined && other.schema < this.schema)
      this.#lower(this.schema - other.schema)
    if (other.count === 0) return
    this.count += sign * other.count
    this.sum += sign * other.sum
    if (sign > 0) {
      if (other.min < this.min) this.min = other.min
      if (other.max > this.max) this.max = other.max
    }
    this.zeroCount += sign * other.zeroCount
    const classic = this.classic
    if (classic !== undefined && other.classic !== undefined)
      for (let i = 0; i < classic.length && i < other.classic.length; i++) classic[i] += sign * other.classic[i]
    if (this.schema === undefined || other.schema === undefined) return
    const from = other.buckets.counts
    if (from === undefined) return
    const otherLo = other.buckets.lo
    for (let j = 0; j < from.length; j++) {
      const c = from[j]
      if (c === 0) continue
      // Re-read each time: adding may lower this schema past the bucket limit.
      const index = coarser(otherLo + j, other.schema - (this.schema as number))
      if (sign > 0) this.#add(index, c)
      else this.buckets.decrement(index, c)
    }
  }

  /** Forgets every observation (the configured schema stays as lowered). */
  clear(): void {
    this.buckets.clear()
    this.count = 0
    this.sum = 0
    this.zeroCount = 0
    this.min = Number.POSITIVE_INFINITY
    this.max = Number.NEGATIVE_INFINITY
    this.classic?.fill(0)
  }

  /** The value exponential bucket `index` stands for at the current schema (mapping.ts's midpoint). */
  representative(index: number): number {
    return bucketMidpoint(index, this.schema as number)
  }
}

/** A value's classic bucket: the smallest bound ≥ value (`le` is inclusive); `bounds.length` is +Inf's. */
export function classicSlot(bounds: ArrayLike<number>, value: number): number {
  let lo = 0
  let hi = bounds.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (bounds[mid] < value) lo = mid + 1
    else hi = mid
  }
  return lo
}
