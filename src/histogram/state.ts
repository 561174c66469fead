import { HistogramCore } from './histogram-core.ts'

/**
 * A HistogramCore's figures in one Float64Array, cheap to structured-clone to the cluster primary: schema (NaN:
 * classic only), zero threshold, bucket limit, count, sum, zero count, min, max, classic slot count (−1: none) and
 * their counts, then the exponential buckets as ascending index, count pairs.
 */
export type CoreState = Float64Array
const CLASSIC_AT = 8
/** Every state has more figures than this (the fixed ones). */
export const CORE_STATE_MIN = CLASSIC_AT

export function coreState(core: HistogramCore): CoreState {
  const out = new Float64Array(stateLength(core))
  const at = writeState(core, out, 0)
  return at === out.length ? out : out.subarray(0, at)
}

/** The length of a core's state (at most: `writeState` may write less). */
export const stateLength = (core: HistogramCore): number =>
  CLASSIC_AT + 1 + (core.classic?.length ?? 0) + 2 * core.bucketCount

/** Writes a core's state into `out` from `at` (room: `stateLength`); returns where it ends. */
export function writeState(core: HistogramCore, out: Float64Array, at: number): number {
  const classic = core.classic
  const n = classic === undefined ? 0 : classic.length
  out[at] = core.schema ?? Number.NaN
  out[at + 1] = core.zeroThreshold
  out[at + 2] = core.maxBuckets
  out[at + 3] = core.count
  out[at + 4] = core.sum
  out[at + 5] = core.zeroCount
  out[at + 6] = core.min
  out[at + 7] = core.max
  out[at + CLASSIC_AT] = classic === undefined ? -1 : n
  if (classic !== undefined) out.set(classic, at + CLASSIC_AT + 1)
  let i = at + CLASSIC_AT + 1 + n
  // The dense counts read in place (Buckets#forEach's order), not through a callback: a report writes hundreds.
  const counts = core.buckets.counts
  if (counts !== undefined) {
    const lo = core.buckets.lo
    for (let j = 0; j < counts.length; j++) {
      if (counts[j] === 0) continue
      out[i++] = lo + j
      out[i++] = counts[j]
    }
  }
  return i
}

/** The schema a state was taken at (undefined: classic buckets only). */
export const stateSchema = (state: CoreState): number | undefined => (Number.isNaN(state[0]) ? undefined : state[0])

/** A HistogramCore holding exactly a state's figures (classic bounds from the reading family). */
export function coreFromState(state: CoreState, bounds: Float64Array | undefined): HistogramCore {
  return fillCore(
    new HistogramCore({ schema: stateSchema(state), zeroThreshold: state[1], maxBuckets: state[2], bounds }),
    state,
  )
}

/** An empty core at the state's schema made to hold exactly the state's figures (reused: no garbage per scrape). */
export function fillCore(core: HistogramCore, state: CoreState): HistogramCore {
  const schema = stateSchema(state)
  const n = Math.max(0, state[CLASSIC_AT])
  // Each bucket at its own index (the core's schema is the state's).
  if (schema !== undefined)
    for (let i = CLASSIC_AT + 1 + n; i + 1 < state.length; i += 2)
      core.observeIndexed(0, state[i + 1], state[i], schema)
  core.count = state[3]
  core.sum = state[4]
  core.zeroCount = state[5]
  core.min = state[6]
  core.max = state[7]
  if (core.classic !== undefined && state[CLASSIC_AT] >= 0)
    core.classic.set(state.subarray(CLASSIC_AT + 1, CLASSIC_AT + 1 + Math.min(n, core.classic.length)))
  return core
}

/** Adds a state's figures to `core` (at the lower of the two schemas): as `core.merge(coreFromState(state))`. */
export function addState(core: HistogramCore, state: CoreState): void {
  const schema = stateSchema(state)
  const n = Math.max(0, state[CLASSIC_AT])
  if (schema !== undefined && core.schema !== undefined) {
    core.lowerTo(schema)
    for (let i = CLASSIC_AT + 1 + n; i + 1 < state.length; i += 2) core.addBucket(state[i], schema, state[i + 1])
  }
  addFigures(core, state)
}

/** count, sum, zero count, min, max and classic counts of `state` added to `core`'s. */
function addFigures(core: HistogramCore, state: CoreState): void {
  if (state[3] === 0) return
  core.count += state[3]
  core.sum += state[4]
  core.zeroCount += state[5]
  if (state[6] < core.min) core.min = state[6]
  if (state[7] > core.max) core.max = state[7]
  const classic = core.classic
  const n = state[CLASSIC_AT]
  if (classic !== undefined && n > 0)
    for (let i = 0; i < classic.length && i < n; i++) classic[i] += state[CLASSIC_AT + 1 + i]
}

/** The increases `addIncrease` found, as index, count pairs (reused). */
let increases = new Float64Array(64)

/**
 * What `next` adds to `prev` (two states of one part of a merged series, one schema) added to `core`, the merged
 * series: a changed part costs its changed buckets, not a merge of every part. Counts are whole numbers, so the
 * increase is exact; the sum grows by its increase, never back. False, `core` untouched, when the schemas differ or a
 * count fell: merge every part again (`clear`, then `addState` each).
 */
export function addIncrease(core: HistogramCore, prev: CoreState, next: CoreState): boolean {
  const schema = stateSchema(next)
  const n = next[CLASSIC_AT]
  if (stateSchema(prev) !== schema || prev[CLASSIC_AT] !== n || next[3] < prev[3] || next[5] < prev[5]) return false
  const start = CLASSIC_AT + 1 + Math.max(0, n)
  for (let i = CLASSIC_AT + 1; i < start; i++) if (next[i] < prev[i]) return false
  let found = 0
  if (schema !== undefined && core.schema !== undefined) {
    // Both ascending by index, in one pass: every bucket of prev must be in next, with no less.
    if (increases.length < next.length) increases = new Float64Array(next.length)
    let i = start
    for (let k = start; k < next.length; k += 2) {
      const index = next[k]
      if (i < prev.length && prev[i] < index) return false
      let had = 0
      if (i < prev.length && prev[i] === index) {
        had = prev[i + 1]
        i += 2
      }
      const more = next[k + 1] - had
      if (more < 0) return false
      if (more > 0) {
        increases[found++] = index
        increases[found++] = more
      }
    }
    if (i < prev.length) return false
  }
  for (let k = 0; k < found; k += 2) core.addBucket(increases[k], schema as number, increases[k + 1])
  if (next[3] === prev[3]) return true
  core.count += next[3] - prev[3]
  core.sum += next[4] - prev[4]
  core.zeroCount += next[5] - prev[5]
  if (next[6] < core.min) core.min = next[6]
  if (next[7] > core.max) core.max = next[7]
  const classic = core.classic
  if (classic !== undefined)
    for (let i = 0; i < classic.length && i < n; i++) classic[i] += next[CLASSIC_AT + 1 + i] - prev[CLASSIC_AT + 1 + i]
  return true
}
