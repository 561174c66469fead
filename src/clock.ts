import { performance } from 'node:perf_hooks'

/**
 * The one place that reads the monotonic clock (ms). The measuring clock is injected from here
 * (`now` in the plugin's and the app's options, then in every dependency), so tests replay
 * streams on virtual time; what schedules work on Node's timers (the idle deadline, the scrape's
 * slices, the simulated model) reads it here too, because its timers run on this clock.
 */
export const monotonicNow = (): number => performance.now()
