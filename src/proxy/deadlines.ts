import { monotonicNow } from '../clock.ts'

/**
 * Every timeout of one exchange or realtime session on one plain timer of the proxy's own, because
 * undici's "fast timers" tick every ~500 ms and fire up to a second late. Activity (`touch`) only
 * stores its time, so a read costs no timer work; `pause` stops the count while the proxy itself
 * holds the upstream back, as undici's did.
 */

/** `headers`: the upstream's head after the request went out whole; `body`, `idle`: silence of the request or response body. */
export const Deadline = { headers: 0, body: 1, total: 2, idle: 3 } as const
export type Deadline = (typeof Deadline)[keyof typeof Deadline]

/** The limits in ms; 0 (or absent): no such deadline. */
export interface DeadlineLimits {
  readonly headers?: number
  readonly body?: number
  readonly total?: number
  readonly idle?: number
}

/** Tests pass their own to step time by hand. */
export interface DeadlineTimers {
  readonly now: () => number
  readonly setTimeout: (fn: () => void, ms: number) => NodeJS.Timeout
  readonly clearTimeout: (timer: NodeJS.Timeout) => void
}

/** Not the injected measuring clock, which tests may hold still. */
const REAL_TIMERS: DeadlineTimers = {
  now: monotonicNow,
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (timer) => clearTimeout(timer),
}

const KINDS = 4
const State = { waiting: 0, running: 1, paused: 2, over: 3 } as const

export class Deadlines {
  // Plain arrays, not typed ones: a typed array costs a backing store per exchange.
  readonly #ms: number[] = [0, 0, 0, 0]
  readonly #since: number[] = [0, 0, 0, 0]
  readonly #state: number[] = [State.waiting, State.waiting, State.waiting, State.waiting]
  readonly #onExpired: (kind: Deadline) => void
  readonly #timers: DeadlineTimers
  #timer: NodeJS.Timeout | undefined
  /** Infinity: none armed. */
  #due = Number.POSITIVE_INFINITY
  readonly #fire = (): void => this.#check()

  constructor(limits: DeadlineLimits, onExpired: (kind: Deadline) => void, timers: DeadlineTimers = REAL_TIMERS) {
    this.#onExpired = onExpired
    this.#timers = timers
    this.#set(Deadline.headers, limits.headers)
    this.#set(Deadline.body, limits.body)
    this.#set(Deadline.total, limits.total)
    this.#set(Deadline.idle, limits.idle)
  }

  /** Once only: a deadline started, cleared or without a limit stays as it is. */
  start(kind: Deadline): void {
    if (this.#state[kind] !== State.waiting) return
    this.#run(kind)
  }

  /** Only the time is kept, no timer work. */
  touch(kind: Deadline): void {
    if (this.#state[kind] === State.running) this.#since[kind] = this.#timers.now()
  }

  pause(kind: Deadline): void {
    if (this.#state[kind] === State.running) this.#state[kind] = State.paused
  }

  resume(kind: Deadline): void {
    if (this.#state[kind] === State.paused) this.#run(kind)
  }

  clear(kind: Deadline): void {
    this.#state[kind] = State.over
    for (let k = 0; k < KINDS; k++) if (this.#state[k] === State.running) return
    // The timer's closure goes now, not when it would fire.
    this.#disarm()
  }

  clearAll(): void {
    this.#allOver()
    this.#disarm()
  }

  // A loop, not Array#fill: fill is a call into the runtime, and this runs on every request's close.
  #allOver(): void {
    for (let k = 0; k < KINDS; k++) this.#state[k] = State.over
  }

  #set(kind: Deadline, ms: number | undefined): void {
    const limit = ms ?? 0
    this.#ms[kind] = limit
    this.#state[kind] = limit > 0 ? State.waiting : State.over
  }

  #run(kind: Deadline): void {
    this.#state[kind] = State.running
    const at = this.#timers.now()
    this.#since[kind] = at
    const due = at + this.#ms[kind]
    if (due < this.#due) this.#arm(due, at)
  }

  #arm(due: number, at: number): void {
    this.#disarm()
    // At least 1 ms: Node's timers count whole ms and may fire a fraction of one early.
    const timer = this.#timers.setTimeout(this.#fire, Math.max(1, Math.ceil(due - at)))
    timer.unref?.()
    this.#timer = timer
    this.#due = due
  }

  #disarm(): void {
    if (this.#timer !== undefined) this.#timers.clearTimeout(this.#timer)
    this.#timer = undefined
    this.#due = Number.POSITIVE_INFINITY
  }

  /** The first expiry ends every deadline, so `onExpired` runs at most once. */
  #check(): void {
    this.#timer = undefined
    this.#due = Number.POSITIVE_INFINITY
    const at = this.#timers.now()
    let next = Number.POSITIVE_INFINITY
    let first = -1
    for (let k = 0; k < KINDS; k++) {
      if (this.#state[k] !== State.running) continue
      const due = this.#since[k] + this.#ms[k]
      if (due < next) {
        next = due
        first = k
      }
    }
    if (first < 0) return
    if (at < next) {
      this.#arm(next, at)
      return
    }
    this.#allOver()
    this.#onExpired(first as Deadline)
  }
}
