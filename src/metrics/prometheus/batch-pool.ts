/**
 * The buffers a scrape's batches are copied into, taken back once the socket wrote them: one chunk per batch instead
 * of per series, and no per-scrape allocation (fresh buffers made V8 mark-compact the heap: bench/scrape-micro.ts).
 */

/** One pool buffer while a scrape fills it or its views are out. */
export interface Slot {
  readonly buf: Buffer
  /** Views of it handed out and not given back. */
  out: number
  /** Still being filled by a scrape. */
  filling: boolean
}

export class BatchPool {
  readonly size: number
  readonly #keep: number
  readonly #free: Buffer[] = []
  /** Weak: a batch never given back (`text()`, a failed write) is collected with its buffer. */
  readonly #slots = new WeakMap<ArrayBufferLike, Slot>()
  readonly #handedOut = new WeakSet<Buffer>()

  /** Buffers of `size` bytes; at most `keep` are kept free between scrapes. */
  constructor(size: number, keep: number) {
    this.size = size
    this.#keep = keep
  }

  /** Buffers free now (for tests). */
  get free(): number {
    return this.#free.length
  }

  batches(): ScrapeBatches {
    return new ScrapeBatches(this)
  }

  take(): Slot {
    const buf = this.#free.pop() ?? Buffer.allocUnsafeSlow(this.size)
    const slot: Slot = { buf, out: 0, filling: true }
    this.#slots.set(buf.buffer, slot)
    return slot
  }

  handOut(slot: Slot, view: Buffer): void {
    slot.out++
    this.#handedOut.add(view)
  }

  /** The scrape filled this slot or ended: it is free once its views are back. */
  done(slot: Slot): void {
    slot.filling = false
    this.#release(slot)
  }

  /** The socket wrote these: their buffers can be filled again (foreign buffers and repeated returns are ignored). */
  recycle(batch: readonly Buffer[]): void {
    for (const view of batch) {
      if (!this.#handedOut.delete(view)) continue
      const slot = this.#slots.get(view.buffer)
      if (slot === undefined) continue
      slot.out--
      this.#release(slot)
    }
  }

  #release(slot: Slot): void {
    if (slot.filling || slot.out > 0) return
    this.#slots.delete(slot.buf.buffer)
    if (this.#free.length < this.#keep) this.#free.push(slot.buf)
  }
}

/** One scrape's pieces copied into pool buffers; what was handed out is never written again. */
export class ScrapeBatches {
  readonly #pool: BatchPool
  #slot: Slot | undefined
  #start = 0
  #pos = 0

  constructor(pool: BatchPool) {
    this.#pool = pool
  }

  /** Bytes added and not yet handed out. */
  get pending(): number {
    return this.#pos - this.#start
  }

  /** Copies `piece` in; returns the batch that filled a buffer, if one did. */
  add(piece: Uint8Array): Buffer[] | undefined {
    let full: Buffer[] | undefined
    let from = 0
    while (from < piece.length) {
      if (this.#slot === undefined) {
        this.#slot = this.#pool.take()
        this.#start = 0
        this.#pos = 0
      }
      const buf = this.#slot.buf
      const n = Math.min(piece.length - from, buf.length - this.#pos)
      buf.set(from === 0 && n === piece.length ? piece : piece.subarray(from, from + n), this.#pos)
      this.#pos += n
      from += n
      if (this.#pos === buf.length) {
        full ??= []
        full.push(...this.take())
        this.#pool.done(this.#slot)
        this.#slot = undefined
      }
    }
    return full
  }

  /** What was added since the last batch, as one (empty when nothing was). */
  take(): Buffer[] {
    if (this.#slot === undefined || this.pending === 0) return []
    const view = this.#slot.buf.subarray(this.#start, this.#pos)
    this.#start = this.#pos
    this.#pool.handOut(this.#slot, view)
    return [view]
  }

  /** The scrape ended (or stopped): its last buffer goes back once its views are. */
  close(): void {
    if (this.#slot !== undefined) this.#pool.done(this.#slot)
    this.#slot = undefined
  }
}
