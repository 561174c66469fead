import { monotonicNow } from '../clock.ts'

/**
 * Every timeout of one exchange (or one realtime session) on the proxy's own timer, with one
 * expiry path: `headers` (the upstream's response head after the request went out whole),
 * `body` (silence of the client's request body), `total` (the whole upstream request) and
 * `idle` (silence between two reads of the response body). undici's own timers run on coarse
 * "fast timers" (a tick every ~500 ms) and fired up to a second late; these fire within a few
 * ms of their setting.
 *
 * One plain timer serves all of them, set for the earliest due. Activity (`touch`) only stores
 * its time, so a read costs no timer work: when the timer fires it ends the exchange if a
 * deadline's silence is at least its limit, else it re-arms for the remainder. The first expiry
 * ends every deadline, so `onExpired` runs at most once.
 *
 * While the proxy itself holds the upstream back (a full client socket) nothing is idle:
 * `pause` stops counting, and the silence counts afresh from `resume`, as undici's did.
 */

export const Deadline = { headers: 0, body: 1, total: 2, idle: 3 } as const
export type Deadline = (typeof Deadline)[keyof typeof Deadline]

/** The limits in ms; 0 (or absent): no such deadline. */
export interface DeadlineLimits {
  readonly headers?: number
  readonly body?: number
  readonly total?: number
  readonly idle?: number
}

/** What the deadlines schedule with; tests pass their own to step time by hand. */
export interface DeadlineTimers {
  /** The monotonic clock (ms) activity and the timer are compared on. */
  readonly now: () => number
  readonly setTimeout: (fn: () => void, ms: number) => NodeJS.Timeout
  readonly clearTimeout: (timer: NodeJS.Timeout) => void
}

/** Node's timers and the monotonic clock they run on (not the injected measuring clock, which tests may hold still). */
const REAL_TIMERS: DeadlineTimers = {
  now: monotonicNow,
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (timer) => clearTimeout(timer),
}

const KINDS = 4
const State = { waiting: 0, running: 1, paused: 2, over: 3 } as const

export class Deadlines {
  // Plain arrays, indexed by Deadline: one small allocation each per exchange (typed arrays cost a backing store).
  readonly #ms: number[] = [0, 0, 0, 0]
  /** When the current silence of each running deadline began (its start, last touch or resume). */
  readonly #since: number[] = [0, 0, 0, 0]
  readonly #state: number[] = [State.waiting, State.waiting, State.waiting, State.waiting]
  readonly #onExpired: (kind: Deadline) => void
  readonly #timers: DeadlineTimers
  #timer: NodeJS.Timeout | undefined
  /** When the armed timer is due (Infinity: none armed). */
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

  /** Starts counting `kind` from now. Once only: a deadline started, cleared or without a limit stays as it is. */
  start(kind: Deadline): void {
    if (this.#state[kind] !== State.waiting) return
    this.#run(kind)
  }

  /** Activity on `kind` (a read, a body chunk): only its time is kept, no timer work. */
  touch(kind: Deadline): void {
    if (this.#state[kind] === State.running) this.#since[kind] = this.#timers.now()
  }

  /** The proxy stopped reading (backpressure): silence from here on does not count for `kind`. */
  pause(kind: Deadline): void {
    if (this.#state[kind] === State.running) this.#state[kind] = State.paused
  }

  /** The proxy reads again: `kind` has its whole limit from now. */
  resume(kind: Deadline): void {
    if (this.#state[kind] === State.paused) this.#run(kind)
  }

  /** `kind` is over (its event came, or its side ended): it can no longer expire. */
  clear(kind: Deadline): void {
    this.#state[kind] = State.over
    for (let k = 0; k < KINDS; k++) if (this.#state[k] === State.running) return
    // Nothing left to watch: the timer (and the closure it holds) goes now, not when it would fire.
    this.#disarm()
  }

  /** The exchange ended: no deadline, and no timer, outlives it. */
  clearAll(): void {
    this.#state.fill(State.over)
    this.#disarm()
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
    // An earlier timer finds this deadline when it fires and re-arms for it.
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

  /** The one expiry path: the deadline whose silence reached its limit first ends them all. */
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
    this.#state.fill(State.over)
    this.#onExpired(first as Deadline)
  }
}
