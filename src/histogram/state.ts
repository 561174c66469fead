import { classicSlot, HistogramCore } from './histogram-core.ts'
import { bucketIndex } from './mapping.ts'

/**
 * A HistogramCore's figures in one Float64Array, cheap to structured-clone to the cluster primary: schema (NaN:
 * classic only), zero threshold, bucket limit, count, sum, zero count, min, max; then the classic counts as how many
 * are sent (−1: no classic buckets), the slot of the first, and those counts: from the first slot that is not 0 to the
 * last (most slots of a series are 0, at either end); then the exponential buckets as ascending index, count pairs.
 */
export type CoreState = Float64Array
const CLASSIC_AT = 8
/** Where the classic counts sent begin. */
const CLASSIC_FROM = CLASSIC_AT + 2
/** Every state has more figures than this (the fixed ones). */
export const CORE_STATE_MIN = CLASSIC_FROM - 1

export function coreState(core: HistogramCore): CoreState {
  const out = new Float64Array(stateLength(core))
  const at = writeState(core, out, 0)
  return at === out.length ? out : out.subarray(0, at)
}

/** The length of a core's state (at most: `writeState` may write less). */
export const stateLength = (core: HistogramCore): number =>
  CLASSIC_FROM + (core.classic?.length ?? 0) + 2 * core.bucketCount

/** Writes a core's state into `out` from `at` (room: `stateLength`); returns where it ends. */
export function writeState(core: HistogramCore, out: Float64Array, at: number): number {
  out[at] = core.schema ?? Number.NaN
  out[at + 1] = core.zeroThreshold
  out[at + 2] = core.maxBuckets
  out[at + 3] = core.count
  out[at + 4] = core.sum
  out[at + 5] = core.zeroCount
  out[at + 6] = core.min
  out[at + 7] = core.max
  let i = at + CLASSIC_FROM
  const classic = core.classic
  if (classic === undefined) {
    out[at + CLASSIC_AT] = -1
    out[at + CLASSIC_AT + 1] = 0
  } else {
    let lo = 0
    let hi = classic.length
    while (lo < hi && classic[lo] === 0) lo++
    while (hi > lo && classic[hi - 1] === 0) hi--
    out[at + CLASSIC_AT] = hi - lo
    out[at + CLASSIC_AT + 1] = hi > lo ? lo : 0
    for (let j = lo; j < hi; j++) out[i++] = classic[j]
  }
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
export const stateSchema = (state: CoreState, at = 0): number | undefined =>
  Number.isNaN(state[at]) ? undefined : state[at]

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
    for (let i = CLASSIC_FROM + n; i + 1 < state.length; i += 2) core.observeIndexed(0, state[i + 1], state[i], schema)
  core.count = state[3]
  core.sum = state[4]
  core.zeroCount = state[5]
  core.min = state[6]
  core.max = state[7]
  const classic = core.classic
  if (classic !== undefined) {
    const lo = state[CLASSIC_AT + 1]
    for (let j = 0; j < n && lo + j < classic.length; j++) classic[lo + j] = state[CLASSIC_FROM + j]
  }
  return core
}

/**
 * Adds a state's figures to `core` (at the lower of the two schemas): as `core.merge(coreFromState(state))`. The state is
 * `state`'s figures `at` to `end` (a report's packed figures are read in place).
 */
export function addState(core: HistogramCore, state: CoreState, at = 0, end = state.length): void {
  const schema = stateSchema(state, at)
  const n = Math.max(0, state[at + CLASSIC_AT])
  if (schema !== undefined && core.schema !== undefined) {
    core.lowerTo(schema)
    for (let i = at + CLASSIC_FROM + n; i + 1 < end; i += 2) core.addBucket(state[i], schema, state[i + 1])
  }
  if (state[at + 3] === 0) return
  core.count += state[at + 3]
  core.sum += state[at + 4]
  core.zeroCount += state[at + 5]
  if (state[at + 6] < core.min) core.min = state[at + 6]
  if (state[at + 7] > core.max) core.max = state[at + 7]
  const classic = core.classic
  if (classic !== undefined) {
    const lo = state[at + CLASSIC_AT + 1]
    const from = at + CLASSIC_FROM
    for (let j = 0; j < n && lo + j < classic.length; j++) classic[lo + j] += state[from + j]
  }
}

/**
 * What `next` (figures `at` to `end`) adds to `prev` (figures 0 to `prevEnd`), two states of one part of a merged
 * series at one schema, added to `core`, the merged series: a changed part costs its changed buckets, not a merge of
 * every part. Counts are whole numbers, so the increase is exact; the sum grows by its increase, never back. False when
 * the schemas differ or a count fell, with `core` partly added to: merge every part again (`clear`, then `addState`).
 */
export function addIncrease(
  core: HistogramCore,
  prev: CoreState,
  prevEnd: number,
  next: CoreState,
  at = 0,
  end = next.length,
): boolean {
  const schema = stateSchema(next, at)
  const n = next[at + CLASSIC_AT]
  const p = prev[CLASSIC_AT]
  if (stateSchema(prev, 0) !== schema || p < 0 !== n < 0 || next[at + 3] < prev[3] || next[at + 5] < prev[5])
    return false
  // The classic counts sent: slots `lo` … `lo + n − 1` of next, `plo` … `plo + p − 1` of prev, within next's (else
  // one fell to 0).
  const lo = next[at + CLASSIC_AT + 1]
  const plo = prev[CLASSIC_AT + 1]
  if (p > 0 && (plo < lo || plo + p > lo + n)) return false
  const classic = core.classic
  const from = at + CLASSIC_FROM
  for (let j = 0; j < n; j++) {
    const k = lo + j - plo
    const more = next[from + j] - (k >= 0 && k < p ? prev[CLASSIC_FROM + k] : 0)
    if (more < 0) return false
    if (classic !== undefined && lo + j < classic.length) classic[lo + j] += more
  }
  if (schema !== undefined && core.schema !== undefined) {
    // Both ascending by index, in one pass: every bucket of prev must be in next, with no less.
    let i = CLASSIC_FROM + Math.max(0, p)
    for (let k = from + Math.max(0, n); k < end; k += 2) {
      const index = next[k]
      let had = 0
      if (i < prevEnd) {
        const was = prev[i]
        if (was < index) return false
        if (was === index) {
          had = prev[i + 1]
          i += 2
        }
      }
      const more = next[k + 1] - had
      if (more < 0) return false
      if (more > 0) core.addBucket(index, schema, more)
    }
    if (i < prevEnd) return false
  }
  if (next[at + 3] === prev[3]) return true
  core.count += next[at + 3] - prev[3]
  core.sum += next[at + 4] - prev[4]
  core.zeroCount += next[at + 5] - prev[5]
  if (next[at + 6] < core.min) core.min = next[at + 6]
  if (next[at + 7] > core.max) core.max = next[at + 7]
  return true
}

/** A kept state with room to grow in place (the cluster primary's part of a merged series): its first `length` figures. */
export interface StateRoom {
  state: CoreState | undefined
  length: number
}

/** Figures a kept state grows by when it moves (a few more buckets before it moves again). */
const ROOM = 8

/** `room`'s state with room for `more` figures beyond its length (moved when it has not). */
function roomFor(room: StateRoom, more: number): CoreState {
  const state = room.state as CoreState
  if (room.length + more <= state.length) return state
  const grown = new Float64Array(room.length + more + ROOM)
  grown.set(state.subarray(0, room.length))
  room.state = grown
  return grown
}

/**
 * Observations (value, weight pairs, figures `at` to `end` of `values`) added to a kept state in place, exactly as
 * `HistogramCore#observe` adds them to the core the state was taken from (same order: the same float sum), and their
 * increase added to `core` (the merged series; undefined: merged again later) as `addIncrease` would add it. The
 * sender's core kept its schema meanwhile (else it sends its state), so no observation lowers it here.
 */
export function observeState(
  room: StateRoom,
  values: Float64Array,
  at: number,
  end: number,
  bounds: Float64Array | undefined,
  core: HistogramCore | undefined,
): void {
  let state = room.state as CoreState
  const schema = stateSchema(state)
  const zero = state[1]
  const count = state[3]
  const sum = state[4]
  const zeroCount = state[5]
  for (let i = at; i + 1 < end; i += 2) {
    const value = values[i]
    const weight = values[i + 1]
    state[3] += weight
    state[4] += value * weight
    if (value < state[6]) state[6] = value
    if (value > state[7]) state[7] = value
    if (schema !== undefined) {
      if ((value <= zero && value >= -zero) || value < 0) state[5] += weight
      else {
        const index = bucketIndex(value, schema)
        state = addPair(room, state, index, weight)
        if (core !== undefined && core.schema !== undefined) core.addBucket(index, schema, weight)
      }
    }
    if (bounds === undefined || state[CLASSIC_AT] < 0) continue
    const slot = classicSlot(bounds, value)
    state = addClassic(room, state, slot, weight)
    if (core?.classic !== undefined) core.classic[slot] += weight
  }
  if (core === undefined || state[3] === count) return
  core.count += state[3] - count
  core.sum += state[4] - sum
  core.zeroCount += state[5] - zeroCount
  if (state[6] < core.min) core.min = state[6]
  if (state[7] > core.max) core.max = state[7]
}

/** `weight` added to exponential bucket `index` of a kept state (a pair inserted in index order when new). */
function addPair(room: StateRoom, state: CoreState, index: number, weight: number): CoreState {
  const first = CLASSIC_FROM + Math.max(0, state[CLASSIC_AT])
  // The first pair whose index is not below `index` (pairs ascend by index).
  let lo = 0
  let hi = (room.length - first) / 2
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (state[first + 2 * mid] < index) lo = mid + 1
    else hi = mid
  }
  const k = first + 2 * lo
  if (k < room.length && state[k] === index) {
    state[k + 1] += weight
    return state
  }
  const out = roomFor(room, 2)
  out.copyWithin(k + 2, k, room.length)
  out[k] = index
  out[k + 1] = weight
  room.length += 2
  return out
}

/** `weight` added to classic slot `slot` of a kept state (its run of counts widened to the slot when outside it). */
function addClassic(room: StateRoom, state: CoreState, slot: number, weight: number): CoreState {
  const n = state[CLASSIC_AT]
  const lo = state[CLASSIC_AT + 1]
  if (n > 0 && slot >= lo && slot < lo + n) {
    state[CLASSIC_FROM + slot - lo] += weight
    return state
  }
  const from = n > 0 ? Math.min(lo, slot) : slot
  const to = n > 0 ? Math.max(lo + n, slot + 1) : slot + 1
  const more = to - from - n
  const out = roomFor(room, more)
  // The pairs move up by the slots added; the run's counts by those added below it.
  out.copyWithin(CLASSIC_FROM + n + more, CLASSIC_FROM + n, room.length)
  const below = n > 0 ? lo - from : 0
  if (below > 0) out.copyWithin(CLASSIC_FROM + below, CLASSIC_FROM, CLASSIC_FROM + n)
  out.fill(0, CLASSIC_FROM, CLASSIC_FROM + below)
  out.fill(0, CLASSIC_FROM + below + n, CLASSIC_FROM + to - from)
  out[CLASSIC_FROM + slot - from] += weight
  out[CLASSIC_AT] = to - from
  out[CLASSIC_AT + 1] = from
  room.length += more
  return out
}
