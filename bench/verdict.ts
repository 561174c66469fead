import { round, sorted } from './stats.ts'

/**
 * How a target gets its verdict, so one that sits on the line does not flip from run to run. A
 * ratio (or difference) row has one value per round; its figure is their median, and it gets a
 * verdict only when the middle half of the rounds agrees: for "≤ t", met when the upper quartile is
 * ≤ t, not met when the lower quartile is > t ("≥ t": mirrored), "inconclusive" in between. A row
 * with a single figure (a scrape's p99 over all its scrapes) is judged on it.
 */

export type Verdict = 'met' | 'not met' | 'inconclusive' | 'n/a' | 'ruled out'

/** A target of a run: its figure, its verdict, and the rounds it came from. */
export interface TargetRow {
  readonly target: string
  readonly value: string
  readonly met: boolean | null
  readonly verdict: Verdict
  readonly rounds?: readonly number[]
  readonly median?: number
  readonly q1?: number
  readonly q3?: number
}

export interface Bound {
  readonly at: number
  readonly kind: 'upper' | 'lower'
}
export const atMost = (at: number): Bound => ({ at, kind: 'upper' })
export const atLeast = (at: number): Bound => ({ at, kind: 'lower' })

/** Quantile of an ascending array by linear interpolation between order statistics (R's type 7, numpy's default). */
function quantile(a: Float64Array, q: number): number {
  if (a.length === 0) return NaN
  const h = (a.length - 1) * q
  const lo = Math.floor(h)
  const hi = Math.min(a.length - 1, lo + 1)
  return a[lo] + (h - lo) * (a[hi] - a[lo])
}

/** Median and quartiles of the finite values (NaN for none). */
export function spread(values: readonly number[]): { median: number; q1: number; q3: number; n: number } {
  const a = sorted(values)
  return { median: quantile(a, 0.5), q1: quantile(a, 0.25), q3: quantile(a, 0.75), n: a.length }
}

/** The interquartile rule above, for rounds against a bound. */
export function verdictOf(values: readonly number[], bound: Bound): Verdict {
  const s = spread(values)
  if (s.n === 0) return 'n/a'
  const within = (v: number): boolean => (bound.kind === 'upper' ? v <= bound.at : v >= bound.at)
  // With one value both quartiles are that value: it decides alone.
  if (within(s.q1) && within(s.q3)) return 'met'
  if (!within(s.q1) && !within(s.q3)) return 'not met'
  return 'inconclusive'
}

const metOf = (v: Verdict): boolean | null => (v === 'met' ? true : v === 'not met' ? false : null)

/** The targets' list and how rows are added to it. */
export function targetList(): {
  targets: TargetRow[]
  /** A row with one figure and its verdict. */
  T: (target: string, value: string, verdict: Verdict | boolean | null) => void
  /** A row from rounds: the median, the quartiles and the rounds printed, judged by verdictOf (no bound: for information). */
  roundsRow: (target: string, values: readonly number[], bound: Bound | undefined, unit?: string) => void
} {
  const targets: TargetRow[] = []
  const T = (target: string, value: string, verdict: Verdict | boolean | null): void => {
    const v: Verdict = verdict === true ? 'met' : verdict === false ? 'not met' : verdict === null ? 'n/a' : verdict
    targets.push({ target, value, met: metOf(v), verdict: v })
  }
  const roundsRow = (target: string, values: readonly number[], bound: Bound | undefined, unit = '×'): void => {
    const xs = values.filter(Number.isFinite)
    if (xs.length === 0) {
      targets.push({ target, value: 'n/a', met: null, verdict: 'n/a' })
      return
    }
    const s = spread(xs)
    const verdict = bound === undefined ? 'n/a' : verdictOf(xs, bound)
    const digits = unit === '×' ? 2 : 3
    targets.push({
      target,
      value: `${round(s.median, digits)}${unit} (median of ${xs.length}; interquartile ${round(s.q1, digits)}–${round(s.q3, digits)}; rounds ${xs.map((x) => round(x, 2)).join(', ')})`,
      met: metOf(verdict),
      verdict,
      rounds: xs.map((x) => round(x, 4)),
      median: round(s.median, 4),
      q1: round(s.q1, 4),
      q3: round(s.q3, 4),
    })
  }
  return { targets, T, roundsRow }
}

/** Ratios of two series of per-round figures, round by round (non-finite ones dropped). */
export const ratios = (a: readonly number[], b: readonly number[]): number[] => a.map((x, i) => x / b[i]).filter((x) => Number.isFinite(x))

/** Ratios of rounds run as b, a, b, …, b: each a-round over the mean of the b-rounds either side, so a drift of the machine cancels to first order. */
export function bracketRatios(a: readonly number[], b: readonly number[]): number[] {
  const out: number[] = []
  for (let i = 0; i < a.length; i++) {
    const ref = i + 1 < b.length ? (b[i] + b[i + 1]) / 2 : b[i]
    const r = a[i] / ref
    if (Number.isFinite(r)) out.push(r)
  }
  return out
}

/** One line of a target as the bench prints it. */
export function describeTarget(t: TargetRow): string {
  return `  ${t.verdict.padEnd(12)} ${t.target}: ${t.value}`
}
