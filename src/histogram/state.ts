import { HistogramCore } from './histogram-core.ts'

/**
 * A HistogramCore's figures in one Float64Array, cheap to structured-clone to the cluster primary: schema (NaN:
 * classic only), zero threshold, bucket limit, count, sum, zero count, min, max, classic slot count (−1: none) and
 * their counts, then the exponential buckets as ascending index, count pairs.
 */
export type CoreState = Float64Array
const CLASSIC_AT = 8

export function coreState(core: HistogramCore): CoreState {
  const classic = core.classic
  const n = classic === undefined ? 0 : classic.length
  const out = new Float64Array(CLASSIC_AT + 1 + n + 2 * core.bucketCount)
  out[0] = core.schema ?? Number.NaN
  out[1] = core.zeroThreshold
  out[2] = core.maxBuckets
  out[3] = core.count
  out[4] = core.sum
  out[5] = core.zeroCount
  out[6] = core.min
  out[7] = core.max
  out[CLASSIC_AT] = classic === undefined ? -1 : n
  if (classic !== undefined) out.set(classic, CLASSIC_AT + 1)
  let at = CLASSIC_AT + 1 + n
  core.forEachBucket((index, count) => {
    out[at++] = index
    out[at++] = count
  })
  return at === out.length ? out : out.subarray(0, at)
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
