import { HistogramCore } from '../../histogram/histogram-core.ts'
import { bucketIndex } from '../../histogram/mapping.ts'
import { quantiles } from '../../histogram/quantiles.ts'

/**
 * Percentiles over sliding windows (1, 5, 15 min): the histogram core at schema 6 (within 0.55 %
 * of the nearest-rank value), kept current by adding each observation and subtracting whole
 * sub-windows ("slots") as they leave, so reading merges nothing. A window of n slots covers n to
 * n + 1 slot widths. Pure: time (ms) is an argument.
 */

/** The live page's resolution: base 2^(1/64), every quantile within (base − 1)/(base + 1) ≈ 0.54 %. */
export const LIVE_SCHEMA = 6
/** @internal The bound every quantile keeps (tests hold the sketch to it). */
export const RELATIVE_ACCURACY = (2 ** (2 ** -LIVE_SCHEMA) - 1) / (2 ** (2 ** -LIVE_SCHEMA) + 1)
/** Values below this count as 0 (seconds: 1 µs). */
export const MIN_VALUE = 1e-6
/** Enough buckets for 1 µs … 10⁵ s at schema 6 with room: the page's resolution never drops in practice. */
const LIVE_MAX_BUCKETS = 4096

/** The bucket an observation goes to in every core of a sketch: computed once for all of them. */
const ZERO = Number.NEGATIVE_INFINITY
export function liveBucket(value: number): number {
  return value > MIN_VALUE ? bucketIndex(value, LIVE_SCHEMA) : ZERO
}

const newCore = (): HistogramCore =>
  new HistogramCore({ schema: LIVE_SCHEMA, zeroThreshold: MIN_VALUE, maxBuckets: LIVE_MAX_BUCKETS })

/** One ring of sub-windows and the windows built from it. */
export interface SketchLevel {
  readonly slotMs: number
  /** Each window's length in slots before the current one (so `[6]` with 10 s slots: the last 60–70 s). */
  readonly windows: readonly number[]
}

/** The page's windows: the last minute from 10 s slots, the last 5 and 15 minutes from 1-minute slots. */
const LIVE_LEVELS: readonly SketchLevel[] = [
  { slotMs: 10_000, windows: [6] },
  { slotMs: 60_000, windows: [5, 15] },
]

class Level {
  readonly slotMs: number
  readonly sizes: readonly number[]
  readonly slots: HistogramCore[]
  readonly totals: HistogramCore[]
  /** The current slot's number (time / slotMs); −∞ before the first observation. */
  epoch = Number.NEGATIVE_INFINITY
  /** When the next slot starts (ms): the hot path compares, no division. */
  nextAt = Number.NEGATIVE_INFINITY
  current: HistogramCore

  constructor(spec: SketchLevel) {
    this.slotMs = spec.slotMs
    this.sizes = spec.windows
    this.slots = Array.from({ length: Math.max(...spec.windows) + 1 }, newCore)
    this.totals = spec.windows.map(newCore)
    this.current = this.slots[0]
  }

  advance(now: number): void {
    const epoch = Math.floor(now / this.slotMs)
    if (epoch <= this.epoch) return
    const ring = this.slots.length
    if (epoch - this.epoch >= ring) {
      // Everything held is older than the longest window.
      for (const s of this.slots) s.clear()
      for (const t of this.totals) t.clear()
    } else {
      for (let e = this.epoch + 1; e <= epoch; e++) {
        // Slot e − n − 1 leaves the window of n slots; slot e (which held e − ring) starts empty.
        for (let w = 0; w < this.sizes.length; w++)
          this.totals[w].subtract(this.slots[mod(e - this.sizes[w] - 1, ring)])
        this.slots[mod(e, ring)].clear()
      }
    }
    this.epoch = epoch
    this.nextAt = (epoch + 1) * this.slotMs
    this.current = this.slots[mod(epoch, ring)]
  }
}

const mod = (a: number, n: number): number => ((a % n) + n) % n

/**
 * A histogram core per sliding window; `window` numbers the windows of all levels in order.
 * `now` must not go back by more than a slot (an older time counts in the current slot).
 */
export class SlidingSketch {
  readonly #levels: Level[]
  /** Bumped by every change to any window, so readers can cache what they computed. */
  version = 0

  constructor(levels: readonly SketchLevel[] = LIVE_LEVELS) {
    this.#levels = levels.map((l) => new Level(l))
  }

  observe(value: number, weight: number, now: number): void {
    this.observeBucket(value, liveBucket(value), weight, now)
  }

  /** `observe` with the bucket already computed by `liveBucket` (one logarithm for several sketches). */
  observeBucket(value: number, bucket: number, weight: number, now: number): void {
    if (!(weight > 0)) return
    const levels = this.#levels
    for (let i = 0; i < levels.length; i++) {
      const level = levels[i]
      if (now >= level.nextAt) level.advance(now)
      level.current.observeIndexed(value, weight, bucket, LIVE_SCHEMA)
      const totals = level.totals
      for (let w = 0; w < totals.length; w++) totals[w].observeIndexed(value, weight, bucket, LIVE_SCHEMA)
    }
    this.version++
  }

  /** Moves the windows to `now`, dropping what left them. */
  advance(now: number): void {
    for (const level of this.#levels) {
      const before = level.epoch
      level.advance(now)
      if (level.epoch !== before) this.version++
    }
  }

  #total(window: number): HistogramCore {
    for (const level of this.#levels) {
      if (window < level.totals.length) return level.totals[window]
      window -= level.totals.length
    }
    throw new RangeError(`no window ${window}`)
  }

  /** Observations (summed weights) in a window at `now`. */
  count(window: number, now: number): number {
    this.advance(now)
    return this.#total(window).count
  }

  /** Nearest-rank quantiles for ascending `qs` (NaN when the window is empty). */
  quantiles(
    window: number,
    qs: readonly number[],
    now: number,
    out: number[] = new Array<number>(qs.length),
  ): number[] {
    this.advance(now)
    quantiles(this.#total(window), qs, out)
    return out
  }

  /** `quantiles` into `out` and the window's count returned, as of the last `advance`. */
  read(window: number, qs: readonly number[], out: number[]): number {
    const total = this.#total(window)
    quantiles(total, qs, out)
    return total.count
  }

  /** A window's histogram at `now` (the distribution chart reads its buckets; do not change it). */
  window(window: number, now: number): HistogramCore {
    this.advance(now)
    return this.#total(window)
  }

  /** Bytes of bucket storage held (typed arrays only). */
  get byteLength(): number {
    let n = 0
    for (const level of this.#levels) {
      for (const s of level.slots) n += s.byteLength
      for (const t of level.totals) n += t.byteLength
    }
    return n
  }
}

/** Sums over the same sliding windows (requests, tokens, stalls). Pure, like the sketch. */
export class SlidingCounter {
  readonly #slotMs: number
  readonly #sizes: readonly number[]
  readonly #slots: Float64Array
  readonly #sums: Float64Array
  #epoch = Number.NEGATIVE_INFINITY
  /** Since the start, never slides. */
  total = 0

  /** `windows` in slots before the current one; default: 1, 5 and 15 minutes of 10 s slots. */
  constructor(slotMs = 10_000, windows: readonly number[] = [6, 30, 90]) {
    this.#slotMs = slotMs
    this.#sizes = windows
    this.#slots = new Float64Array(Math.max(...windows) + 1)
    this.#sums = new Float64Array(windows.length)
  }

  add(value: number, now: number): void {
    this.#advance(now)
    this.#slots[mod(this.#epoch, this.#slots.length)] += value
    for (let w = 0; w < this.#sums.length; w++) this.#sums[w] += value
    this.total += value
  }

  /** The sum over window `w` (0: 1 min, 1: 5 min, 2: 15 min by default) at `now`. */
  sum(w: number, now: number): number {
    this.#advance(now)
    const s = this.#sums[w]
    return s < 1e-9 ? 0 : s
  }

  #advance(now: number): void {
    const epoch = Math.floor(now / this.#slotMs)
    if (epoch <= this.#epoch) return
    const ring = this.#slots.length
    if (epoch - this.#epoch >= ring) {
      this.#slots.fill(0)
      this.#sums.fill(0)
    } else {
      for (let e = this.#epoch + 1; e <= epoch; e++) {
        for (let w = 0; w < this.#sizes.length; w++) this.#sums[w] -= this.#slots[mod(e - this.#sizes[w] - 1, ring)]
        this.#slots[mod(e, ring)] = 0
      }
    }
    this.#epoch = epoch
  }
}
