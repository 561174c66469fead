import { coarser } from './mapping.ts'

/** Slots added on each side when the dense range grows, so a series settles after a few growths. */
const SLACK = 8

/** The counts of a histogram's exponential buckets, dense between the lowest and highest populated one (as sdk-metrics' Buckets). */
export class Buckets {
  /** Counts of buckets `lo` … `lo + counts.length − 1` (undefined until the first bucket). */
  counts: Float64Array | undefined
  lo = 0
  /** Non-zero slots of `counts`. */
  populated = 0

  /** Whether bucket `index` has a slot. */
  covers(index: number): boolean {
    const counts = this.counts
    return counts !== undefined && index >= this.lo && index < this.lo + counts.length
  }

  /** How many slots the range would hold once grown to cover `index`. */
  widthWith(index: number): number {
    const counts = this.counts as Float64Array
    return Math.max(this.lo + counts.length, index + SLACK + 1) - Math.min(this.lo, index - SLACK)
  }

  /** Grows the range to cover `index`, with slack on the side it grew. */
  cover(index: number): void {
    const counts = this.counts
    if (counts === undefined) {
      this.lo = index - SLACK
      this.counts = new Float64Array(2 * SLACK + 1)
      return
    }
    const lo = Math.min(this.lo, index - SLACK)
    const grown = new Float64Array(Math.max(this.lo + counts.length, index + SLACK + 1) - lo)
    grown.set(counts, this.lo - lo)
    this.lo = lo
    this.counts = grown
  }

  /** Adds `weight` to bucket `index`: 1 when it was empty, 0 when not, −1 when the range does not cover it (`cover` first). */
  increment(index: number, weight: number): number {
    const counts = this.counts
    const slot = index - this.lo
    if (counts === undefined || slot < 0 || slot >= counts.length) return -1
    if (counts[slot] === 0) {
      this.populated++
      counts[slot] = weight
      return 1
    }
    counts[slot] += weight
    return 0
  }

  /** Takes `weight` from bucket `index` (if covered); what float sums leave a hair above 0 is cleared. */
  decrement(index: number, weight: number): void {
    const counts = this.counts
    const slot = index - this.lo
    if (counts === undefined || slot < 0 || slot >= counts.length) return
    const left = counts[slot] - weight
    if (left < 1e-9) {
      if (counts[slot] !== 0) this.populated--
      counts[slot] = 0
    } else counts[slot] = left
  }

  /** Lowers the resolution by `by` steps: each count moves to the coarser bucket that holds it. */
  downscale(by: number): void {
    const old = this.counts
    if (old === undefined) return
    const oldLo = this.lo
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
    this.lo = lo
    this.counts = counts
    this.populated = populated
  }

  /** The count of bucket `index` (0 outside the range). */
  get(index: number): number {
    const counts = this.counts
    const slot = index - this.lo
    return counts === undefined || slot < 0 || slot >= counts.length ? 0 : counts[slot]
  }

  /** Calls `visit(index, count)` for every populated bucket, ascending. */
  forEach(visit: (index: number, count: number) => void): void {
    const counts = this.counts
    if (counts === undefined) return
    const lo = this.lo
    for (let j = 0; j < counts.length; j++) if (counts[j] !== 0) visit(lo + j, counts[j])
  }

  /** Lowest and highest populated bucket indexes, or undefined with none. */
  range(): { readonly lo: number; readonly hi: number } | undefined {
    const counts = this.counts
    if (counts === undefined || this.populated === 0) return undefined
    let a = 0
    while (counts[a] === 0) a++
    let b = counts.length - 1
    while (counts[b] === 0) b--
    return { lo: this.lo + a, hi: this.lo + b }
  }

  clear(): void {
    this.counts = undefined
    this.populated = 0
  }
}
