import { monotonicNow } from '../clock.ts'

/**
 * The upstream idle timeout (`upstream.idle_timeout_ms`, the longest silence between two reads
 * of a response body) on the proxy's own timer. undici's `bodyTimeout` runs on its coarse "fast
 * timers" (a tick every ~500 ms), so it fired up to about a second late, and it refreshes its
 * timer on every HTTP chunk. This is one plain timer per exchange, never touched per read: a
 * read only stores its time. When the timer fires, it ends the exchange if the last read is at
 * least `ms` ago, else it re-arms for the remainder, so it fires within a few ms of the setting.
 *
 * While the proxy itself holds the upstream back (the client's socket is full, the upstream is
 * paused) nothing is idle: the timer does nothing then, and the silence counts from the resume,
 * as undici's did.
 */

/** What the deadline schedules with; tests pass their own to step time by hand. */
export interface IdleTimers {
  /** The monotonic clock (ms) the reads and the timer are compared on. */
  readonly now: () => number
  readonly setTimeout: (fn: () => void, ms: number) => NodeJS.Timeout
  readonly clearTimeout: (timer: NodeJS.Timeout) => void
}

/** Node's timers and the monotonic clock they run on (not the injected measuring clock, which tests may hold still). */
const REAL_TIMERS: IdleTimers = {
  now: monotonicNow,
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (timer) => clearTimeout(timer),
}

export class IdleDeadline {
  readonly #ms: number
  readonly #onTimeout: () => void
  readonly #timers: IdleTimers
  #timer: NodeJS.Timeout | undefined
  /** When the last read came (or the head, or the resume). */
  #last = 0
  #paused = false
  #over = false
  readonly #fire = (): void => this.#check()

  /** `ms` 0: no idle limit (the deadline never arms). */
  constructor(ms: number, onTimeout: () => void, timers: IdleTimers = REAL_TIMERS) {
    this.#ms = ms
    this.#onTimeout = onTimeout
    this.#timers = timers
    this.#over = ms <= 0
  }

  /** The response head came: the body has `ms` from now for its first read. Once only. */
  start(): void {
    if (this.#over || this.#timer !== undefined) return
    this.#last = this.#timers.now()
    this.#arm(this.#ms)
  }

  /** A read of the body came: only its time is kept (no timer work per read). */
  read(): void {
    if (!this.#over) this.#last = this.#timers.now()
  }

  /** The proxy stopped reading the upstream (backpressure): silence from here on is not idleness. */
  pause(): void {
    this.#paused = true
  }

  /** The proxy reads the upstream again: the upstream has `ms` from now. */
  resume(): void {
    if (!this.#paused) return
    this.#paused = false
    if (this.#over) return
    this.#last = this.#timers.now()
    if (this.#timer === undefined) this.#arm(this.#ms)
  }

  /** The body ended, failed, or the exchange closed. */
  clear(): void {
    this.#over = true
    if (this.#timer !== undefined) this.#timers.clearTimeout(this.#timer)
    this.#timer = undefined
  }

  #arm(ms: number): void {
    const timer = this.#timers.setTimeout(this.#fire, ms)
    timer.unref?.()
    this.#timer = timer
  }

  #check(): void {
    this.#timer = undefined
    // Paused: resume() re-arms. Over: clear() came first.
    if (this.#over || this.#paused) return
    const silent = this.#timers.now() - this.#last
    if (silent >= this.#ms) {
      this.#over = true
      this.#onTimeout()
      return
    }
    // A read came since the timer was set: wait for the rest of the limit after that read.
    // (At least 1 ms: Node's timers count whole ms and may fire a fraction of one early.)
    this.#arm(Math.max(1, Math.ceil(this.#ms - silent)))
  }
}
