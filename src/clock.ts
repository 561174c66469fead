import { performance } from 'node:perf_hooks'

/**
 * The one place that reads the monotonic clock (ms): measuring code gets it injected as `now`, so tests replay streams on
 * virtual time, and what schedules Node timers reads it here because those timers run on this clock.
 */
export const monotonicNow = (): number => performance.now()
