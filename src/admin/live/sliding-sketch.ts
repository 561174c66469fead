/**
 * Percentiles over sliding time windows (the last 1, 5 and 15 minutes), exact to 1 % of the
 * value: a DDSketch (Masson, Rim and Lee, VLDB 2019, https://arxiv.org/abs/1908.10693) per
 * window, kept current by adding every observation to it and subtracting whole sub-windows as
 * they leave it. Pure: time (ms) is an argument, never read.
 *
 * A value v > 0 goes to bin i = ceil(log_γ v) with γ = (1 + α) / (1 − α), α = 0.01; the bin's
 * representative 2γ^i / (γ + 1) is within α of every value in it. Values below 1 µs (bursts:
 * chunks that arrived in one read) count as 0. Bins are dense typed arrays covering only the
 * indexes seen, so a series whose values span 1 ms … 2 s holds ~380 bins, and never more than
 * the 1,267 bins from 1 µs to 10⁵ s.
 *
 * Windows: each level is a ring of sub-windows ("slots") of `slotMs`; a window of n slots holds
 * the current slot and the n before it, so it covers between n and n + 1 slot widths of time
 * (the last minute is 60–70 s with 10 s slots). An observation is added to its slot in every
 * level and to every window total; when a slot leaves a window it is subtracted from that total.
 * Reading a window is one walk over its total's bins; nothing is merged at read time.
 */

/** Relative accuracy of every quantile. */
export const RELATIVE_ACCURACY = 0.01
const GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
const INV_LOG_GAMMA = 1 / Math.log(GAMMA)
/** Values below this count as 0 (seconds: 1 µs). */
export const MIN_VALUE = 1e-6
/** Values above this are kept as this (seconds: 27 hours). */
export const MAX_VALUE = 1e5
const MIN_INDEX = Math.ceil(Math.log(MIN_VALUE) * INV_LOG_GAMMA)
const MAX_INDEX = Math.ceil(Math.log(MAX_VALUE) * INV_LOG_GAMMA)
const EMPTY = new Float64Array(0)
/** Bins a store starts with around its first index (it grows by half its size at a time). */
const INITIAL_BINS = 32

/** The bin of every value below MIN_VALUE (0 included). */
export const ZERO_BIN = MIN_INDEX - 1

/** Bins from the zero bin to the top one: `bin − ZERO_BIN` indexes a dense array of them all. */
export const BIN_COUNT = MAX_INDEX - ZERO_BIN + 1

/** The bin of a value; MIN_INDEX − 1 is the zero bin. */
export function binOf(value: number): number {
  if (!(value >= MIN_VALUE)) return MIN_INDEX - 1
  if (value >= MAX_VALUE) return MAX_INDEX
  return Math.ceil(Math.log(value) * INV_LOG_GAMMA)
}

const binValueOf = (bin: number): number => (bin < MIN_INDEX ? 0 : (2 * GAMMA ** bin) / (GAMMA + 1))
/** Every bin's value, the zero bin's first: a quantile walk reads it, no power per answer. */
const BIN_VALUES = Float64Array.from({ length: BIN_COUNT }, (_, i) => binValueOf(i + ZERO_BIN))

/** The value a bin stands for (0 for the zero bin). */
export function binValue(bin: number): number {
  const i = bin - ZERO_BIN
  return i >= 0 && i < BIN_COUNT ? BIN_VALUES[i] : binValueOf(bin)
}

/**
 * Counts by bin over a contiguous range of bins that grows as needed, and the zero bin's count
 * apart (else a stream with bursts would span every bin from 1 µs to its gaps). Slots hold
 * Float32 counts (exact to 2^24 a bin, far above a slot's traffic), window totals Float64.
 */
class Store {
  /** Bin of `counts[0]`. */
  lo = 0
  counts: Float64Array | Float32Array | undefined
  zero = 0
  total = 0
  readonly #wide: boolean

  constructor(wide: boolean) {
    this.#wide = wide
  }

  add(bin: number, weight: number): void {
    this.total += weight
    if (bin === ZERO_BIN) {
      this.zero += weight
      return
    }
    let counts = this.counts
    if (counts === undefined || bin < this.lo || bin >= this.lo + counts.length) counts = this.#cover(bin)
    counts[bin - this.lo] += weight
  }

  /** Takes away another store's counts (which this store's range covers). */
  subtract(other: Store): void {
    if (other.total === 0) return
    this.zero -= other.zero
    this.total -= other.total
    const from = other.counts
    const counts = this.counts
    if (from !== undefined && counts !== undefined) {
      const shift = other.lo - this.lo
      for (let j = 0; j < from.length; j++) if (from[j] !== 0) counts[shift + j] -= from[j]
    }
    // Float sums drift by ulps; a window that is empty must read as empty.
    if (this.total < 1e-9) this.clear()
  }

  clear(): void {
    this.counts = undefined
    this.zero = 0
    this.total = 0
  }

  get byteLength(): number {
    return this.counts?.byteLength ?? 0
  }

  /**
   * Nearest-rank quantiles (the smallest value whose cumulative count reaches q × total), for
   * ascending `qs`, into `out`. NaN for an empty store. Quantiles up to the median are walked
   * from the bottom, the others from the top (a p99 passes ~1 % of the counts, not 99 %): the
   * cumulative count below a bin is the total less the counts above it, the same sums as the
   * bottom's while counts are whole (every weight here is), and within the millionth of a count
   * that both walks allow for float sums.
   */
  quantiles(qs: readonly number[], out: number[]): void {
    const n = qs.length
    if (this.total <= 0) {
      for (let i = 0; i < n; i++) out[i] = Number.NaN
      return
    }
    const counts = this.counts ?? EMPTY
    const total = this.total
    let high = 0
    while (high < n && qs[high] <= 0.5) high++
    // From the bottom: qs[0 … high).
    let q = 0
    if (q < high) {
      let rank = Math.max(1e-9, qs[0] * total)
      let seen = this.zero
      while (q < high && seen >= rank - 1e-6) {
        out[q++] = 0
        if (q < high) rank = Math.max(1e-9, qs[q] * total)
      }
      for (let j = 0; j < counts.length && q < high; j++) {
        seen += counts[j]
        // A tolerance of a millionth of a count: the totals are float sums.
        while (q < high && seen >= rank - 1e-6) {
          out[q++] = binValue(this.lo + j)
          if (q < high) rank = Math.max(1e-9, qs[q] * total)
        }
      }
      for (; q < high; q++) out[q] = binValue(this.lo + counts.length - 1)
    }
    // From the top: qs[high … n), the largest first. `seen` is the count up to bin j included;
    // bin j is the answer for a rank once the count below it (seen − counts[j]) falls short.
    q = n - 1
    if (q < high) return
    let rank = Math.max(1e-9, qs[q] * total)
    let seen = total
    for (let j = counts.length - 1; j >= 0 && q >= high; j--) {
      const below = seen - counts[j]
      while (q >= high && below < rank - 1e-6) {
        out[q--] = binValue(this.lo + j)
        if (q >= high) rank = Math.max(1e-9, qs[q] * total)
      }
      seen = below
    }
    // What is left lies in the zero bin.
    for (; q >= high; q--) out[q] = 0
  }

  /** Calls `visit(bin, count)` for every non-empty bin, ascending. */
  forEach(visit: (bin: number, count: number) => void): void {
    if (this.zero > 0) visit(ZERO_BIN, this.zero)
    const counts = this.counts
    if (counts === undefined) return
    for (let j = 0; j < counts.length; j++) if (counts[j] > 0) visit(this.lo + j, counts[j])
  }

  #cover(bin: number): Float64Array | Float32Array {
    const old = this.counts
    if (old === undefined) {
      const lo = Math.max(MIN_INDEX, Math.min(bin - INITIAL_BINS / 2, MAX_INDEX + 1 - INITIAL_BINS))
      this.lo = lo
      this.counts = this.#wide ? new Float64Array(INITIAL_BINS) : new Float32Array(INITIAL_BINS)
      return this.counts
    }
    const grow = Math.max(INITIAL_BINS, old.length >> 1)
    const lo = Math.max(MIN_INDEX, Math.min(this.lo, bin - grow))
    const hi = Math.min(MAX_INDEX + 1, Math.max(this.lo + old.length, bin + 1 + grow))
    const counts = this.#wide ? new Float64Array(hi - lo) : new Float32Array(hi - lo)
    counts.set(old, this.lo - lo)
    this.lo = lo
    this.counts = counts
    return counts
  }
}

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
  readonly slots: Store[]
  readonly totals: Store[]
  /** The current slot's number (time / slotMs); −∞ before the first observation. */
  epoch = Number.NEGATIVE_INFINITY
  /** When the next slot starts (ms): the hot path compares, no division. */
  nextAt = Number.NEGATIVE_INFINITY
  current: Store

  constructor(spec: SketchLevel) {
    this.slotMs = spec.slotMs
    this.sizes = spec.windows
    this.slots = Array.from({ length: Math.max(...spec.windows) + 1 }, () => new Store(false))
    this.totals = spec.windows.map(() => new Store(true))
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
        // (The ring holds epochs e − ring … e − 1, so slot e − n − 1 is still there.)
        for (let w = 0; w < this.sizes.length; w++) this.totals[w].subtract(this.slots[mod(e - this.sizes[w] - 1, ring)])
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
 * A DDSketch per sliding window. `observe(value, weight, now)`; `quantiles(window, qs, now)`
 * where `window` numbers the windows of all levels in order (0: 1 min, 1: 5 min, 2: 15 min
 * with LIVE_LEVELS). `now` must not go backwards by more than a slot (an older time counts in
 * the current slot).
 */
export class SlidingSketch {
  readonly #levels: Level[]
  /** Bumped by every change to any window, so readers can cache what they computed. */
  version = 0

  constructor(levels: readonly SketchLevel[] = LIVE_LEVELS) {
    this.#levels = levels.map((l) => new Level(l))
  }

  observe(value: number, weight: number, now: number): void {
    if (!(weight > 0)) return
    this.observeBin(binOf(value), weight, now)
  }

  /** `observe` with the bin already computed (one logarithm for several sketches). */
  observeBin(bin: number, weight: number, now: number): void {
    const levels = this.#levels
    for (let i = 0; i < levels.length; i++) {
      const level = levels[i]
      if (now >= level.nextAt) level.advance(now)
      level.current.add(bin, weight)
      const totals = level.totals
      for (let w = 0; w < totals.length; w++) totals[w].add(bin, weight)
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

  #total(window: number): Store {
    for (const level of this.#levels) {
      if (window < level.totals.length) return level.totals[window]
      window -= level.totals.length
    }
    throw new RangeError(`no window ${window}`)
  }

  /** Observations (summed weights) in a window at `now`. */
  count(window: number, now: number): number {
    this.advance(now)
    return this.#total(window).total
  }

  /** Nearest-rank quantiles for ascending `qs` (NaN when the window is empty). */
  quantiles(window: number, qs: readonly number[], now: number, out: number[] = new Array<number>(qs.length)): number[] {
    this.advance(now)
    this.#total(window).quantiles(qs, out)
    return out
  }

  /**
   * `quantiles` and `count` of a window at once, as of the last `advance` (the caller has
   * moved the windows to its `now`): the quantiles into `out`, the count returned.
   */
  read(window: number, qs: readonly number[], out: number[]): number {
    const total = this.#total(window)
    total.quantiles(qs, out)
    return total.total
  }

  /** `visit(value, count)` for each non-empty bin of a window, ascending (the distribution chart). */
  forEachBin(window: number, now: number, visit: (bin: number, count: number) => void): void {
    this.advance(now)
    this.#total(window).forEach(visit)
  }

  /** Bytes of bin storage held (typed arrays only). */
  get byteLength(): number {
    let n = 0
    for (const level of this.#levels) {
      for (const s of level.slots) n += s.byteLength
      for (const t of level.totals) n += t.byteLength
    }
    return n
  }
}

/**
 * Sums over the same sliding windows (counts of requests, tokens, stalls): a ring of slots and
 * a running sum per window. Pure, like the sketch.
 */
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
