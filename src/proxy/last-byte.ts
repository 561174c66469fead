/**
 * t_end (CONTRACT.md): when `end()` handed the last bytes to the kernel, else when the last write
 * completed; never `close`, which comes after the measuring work the client does not wait for.
 */

interface EndingResponse {
  readonly writableEnded: boolean
  readonly socket: { readonly writableLength: number } | null
  on(event: 'prefinish' | 'finish', listener: () => void): unknown
}

export class LastByte {
  readonly #res: EndingResponse
  readonly #now: () => number
  #at: number | undefined

  constructor(res: EndingResponse, now: () => number) {
    this.#res = res
    this.#now = now
  }

  /**
   * Listens for the end; call once, before `end()`. Not at the start: two listeners held
   * for a stream's whole life cost each open stream about 0.7 KiB (bench/lab/heap-per-stream.ts).
   */
  watch(): void {
    const res = this.#res
    // 'prefinish' comes within end() once the response handed its last bytes to the socket. Both
    // come once per response: plain listeners, not once wrappers (a bound function each, per request).
    res.on('prefinish', () => this.settle())
    res.on('finish', () => {
      this.#at ??= this.#now()
    })
  }

  /** Undefined until then, and for an answer that never ended. */
  get at(): number | undefined {
    return this.#at
  }

  /** Call after uncorking the socket. */
  settle(): void {
    if (this.#at !== undefined || !this.#res.writableEnded) return
    if (this.#res.socket?.writableLength === 0) this.#at = this.#now()
  }
}
