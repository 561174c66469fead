/**
 * The upstream headers timeout on the proxy's own timer. undici runs its headers timeout on its
 * coarse "fast timers" (a tick every ~500 ms), so `headers_timeout_ms: 1000` answered after about
 * 1.4 s; a plain setTimeout fires within a millisecond or two of its setting. undici's own timer
 * stays as the backstop while a streamed request body is still being written (it restarts on
 * every body write); this one starts once the request has been sent whole.
 */
export class HeadersDeadline {
  readonly #ms: number
  readonly #onTimeout: () => void
  #timer: NodeJS.Timeout | undefined
  #over = false

  constructor(ms: number, onTimeout: () => void) {
    this.#ms = ms
    this.#onTimeout = onTimeout
  }

  /** The request is out: the upstream has `ms` from now to send its response head. Once only. */
  start(): void {
    if (this.#over || this.#timer !== undefined) return
    this.#timer = setTimeout(() => {
      this.#over = true
      this.#onTimeout()
    }, this.#ms)
    this.#timer.unref()
  }

  /** The head came, or the exchange ended first. */
  clear(): void {
    this.#over = true
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    // A cleared Timeout still holds its callback: let both go, not keep them for the whole stream.
    this.#timer = undefined
  }
}
