/**
 * t_end, the last byte written to the client (CONTRACT.md): the moment `end()` handed the
 * answer's last bytes to the kernel, when the socket took them all then (the usual case: Node
 * writes synchronously once uncorked), else when the last write completed (`finish`). Never the
 * response's `close`: that comes ticks later, after the measuring work of the same turn (the
 * last read's parse and count), which the client does not wait for.
 */

/** The part of a response (HTTP/1, or HTTP/2's compatibility response) the stamp is read from. */
interface EndingResponse {
  readonly writableEnded: boolean
  readonly socket: { readonly writableLength: number } | null
  once(event: 'prefinish' | 'finish', listener: () => void): unknown
}

export class LastByte {
  readonly #res: EndingResponse
  readonly #now: () => number
  #at: number | undefined

  constructor(res: EndingResponse, now: () => number) {
    this.#res = res
    this.#now = now
    // 'prefinish' comes within end() once the response handed its last bytes to the socket.
    res.once('prefinish', () => this.settle())
    res.once('finish', () => {
      this.#at ??= now()
    })
  }

  /** When the last byte was written; undefined until then (and for an answer that never ended). */
  get at(): number | undefined {
    return this.#at
  }

  /** Stamps now if the response ended and its socket holds nothing back (call after uncorking it). */
  settle(): void {
    if (this.#at !== undefined || !this.#res.writableEnded) return
    if (this.#res.socket?.writableLength === 0) this.#at = this.#now()
  }
}
