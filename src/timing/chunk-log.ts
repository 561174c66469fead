/**
 * The arrival marks of one response's content chunks: time (ms, monotonic), tokens, kind.
 *
 * Kept compact because it lives as long as the stream (a 10-minute stream at 100 chunks/s has
 * 60,000 marks) and because a client that stops reading still has marks for every chunk the
 * kernel's socket buffers took (megabytes on loopback). 8 bytes a mark: the time as whole
 * microseconds since the first mark of its page (Uint32, up to 71 minutes) and the tokens with
 * the kind in the top two bits (Uint32). Storage grows by pages of 1,024 marks, never by
 * copying the whole log, so the slack is at most one page (8 KiB) and growing never needs
 * twice the memory. The first page starts at 16 marks (small typed arrays live inside the
 * JS object, no separate allocation) and doubles up to a full page.
 * A time that does not fit (a page spanning more than 71 minutes, or a clock going backwards)
 * switches the log to exact Float64 times (12 bytes a mark) from then on.
 */

export const MarkKind = { text: 0, reasoning: 1, tool: 2 } as const
export type MarkKind = (typeof MarkKind)[keyof typeof MarkKind]

const FIRST = 16
const PAGE_BITS = 10
const PAGE = 1 << PAGE_BITS
const MASK = PAGE - 1
/** µs per ms: times are kept to the microsecond (the log line's precision). */
const US = 1000
const MAX_OFFSET = 0xffffffff
const KIND_SHIFT = 30
/** A chunk's token count is capped at 2^30 − 1 (the top two bits hold its kind). */
export const MAX_MARK_TOKENS = (1 << KIND_SHIFT) - 1

/** A token count as stored: whole, 0 for nonsense (negative, NaN), capped. */
const stored = (tokens: number): number => (tokens >= MAX_MARK_TOKENS ? MAX_MARK_TOKENS : tokens > 0 ? tokens >>> 0 : 0)

export class ChunkLog {
  /** Per page: the time of its first mark (ms). */
  #base: number[] = []
  /** Per page: µs since the page's base. */
  #offset: Uint32Array[] = []
  /** Per page: exact times, once a time did not fit an offset (then #offset is unused). */
  #exact: Float64Array[] | undefined
  /** Per page: tokens | kind << 30. */
  #marks: Uint32Array[] = []
  #count = 0
  /** Whether every count came from the provider (else some are tokenizer estimates). */
  #allExact = true

  get count(): number {
    return this.#count
  }

  get allExact(): boolean {
    return this.#allExact
  }

  /** Bytes of mark storage allocated (typed arrays only), for memory accounting. */
  get byteLength(): number {
    let n = 0
    for (const m of this.#marks) n += m.byteLength
    for (const o of this.#exact ?? this.#offset) n += o.byteLength
    return n
  }

  add(at: number, tokens: number, kind: MarkKind, exact: boolean): void {
    const i = this.#count
    const p = i >>> PAGE_BITS
    const j = i & MASK
    let marks = this.#marks[p]
    if (marks === undefined || j === marks.length) marks = this.#grow(p)
    marks[j] = stored(tokens) | (kind << KIND_SHIFT)
    if (this.#exact !== undefined) this.#exact[p][j] = at
    else {
      if (j === 0) this.#base[p] = at
      const offset = Math.round((at - this.#base[p]) * US)
      if (offset >= 0 && offset <= MAX_OFFSET) this.#offset[p][j] = offset
      else {
        this.#widen()[p][j] = at
      }
    }
    this.#count = i + 1
    if (!exact) this.#allExact = false
  }

  at(i: number): number {
    const p = i >>> PAGE_BITS
    if (this.#exact !== undefined) return this.#exact[p][i & MASK]
    return this.#base[p] + this.#offset[p][i & MASK] / US
  }

  tokens(i: number): number {
    return this.#marks[i >>> PAGE_BITS][i & MASK] & MAX_MARK_TOKENS
  }

  kind(i: number): MarkKind {
    return (this.#marks[i >>> PAGE_BITS][i & MASK] >>> KIND_SHIFT) as MarkKind
  }

  /** Replace every chunk's token count (after reconciling with the provider's usage). */
  setTokens(i: number, tokens: number): void {
    const page = this.#marks[i >>> PAGE_BITS]
    const j = i & MASK
    page[j] = stored(tokens) | (page[j] & ~MAX_MARK_TOKENS)
  }

  /** Room for mark `p << PAGE_BITS`…: a new page, or the first page doubled. */
  #grow(p: number): Uint32Array {
    const old = this.#marks[p]
    const n = old === undefined ? (p === 0 ? FIRST : PAGE) : old.length * 2
    const marks = new Uint32Array(n)
    if (old !== undefined) marks.set(old)
    this.#marks[p] = marks
    if (this.#exact !== undefined) {
      const exact = new Float64Array(n)
      if (old !== undefined) exact.set(this.#exact[p])
      this.#exact[p] = exact
    } else {
      const offset = new Uint32Array(n)
      if (old !== undefined) offset.set(this.#offset[p])
      this.#offset[p] = offset
    }
    return marks
  }

  /** Switches every page to exact Float64 times (rare: see the class comment); returns the pages. */
  #widen(): Float64Array[] {
    const exact: Float64Array[] = []
    for (let p = 0; p < this.#marks.length; p++) {
      const page = new Float64Array(this.#marks[p].length)
      const offset = this.#offset[p]
      const base = this.#base[p]
      // Marks of this page written so far (the current one is written by the caller).
      const n = Math.min(page.length, this.#count - (p << PAGE_BITS))
      for (let j = 0; j < n; j++) page[j] = base + offset[j] / US
      exact.push(page)
    }
    this.#exact = exact
    this.#offset = []
    return exact
  }
}
