/**
 * The arrival marks of one response's content chunks (time in ms, tokens, kind), kept compact because
 * the log lives as long as the stream. 8 bytes a mark: µs since the page's first mark and tokens with the
 * kind in the top two bits, interleaved in one typed array per page; pages of 1,024 grow without copying
 * the log (the first starts at 8 marks, small enough to live inside its JS object). A time that does not
 * fit (over 71 minutes, a clock going backwards) switches the log to exact Float64 times from then on.
 */

export const MarkKind = { text: 0, reasoning: 1, tool: 2 } as const
export type MarkKind = (typeof MarkKind)[keyof typeof MarkKind]

const FIRST = 8
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
  /** Per page, two Uint32 a mark (µs offset, tokens | kind << 30); one once times are exact. */
  #pages: Uint32Array[] = []
  /** Uint32 slots a mark in #pages (2, or 1 with exact times). */
  #stride = 2
  /** Per page: exact times, once a time did not fit an offset. */
  #exact: Float64Array[] | undefined
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
    for (const page of this.#pages) n += page.byteLength
    for (const exact of this.#exact ?? []) n += exact.byteLength
    return n
  }

  add(at: number, tokens: number, kind: MarkKind, exact: boolean): void {
    const i = this.#count
    const p = i >>> PAGE_BITS
    const j = i & MASK
    const stride = this.#stride
    let page = this.#pages[p]
    if (page === undefined || j * stride === page.length) page = this.#grow(p)
    page[j * stride + stride - 1] = stored(tokens) | (kind << KIND_SHIFT)
    if (this.#exact !== undefined) this.#exact[p][j] = at
    else {
      if (j === 0) {
        if (p === 0) this.#base = [at]
        else this.#base.push(at)
      }
      const offset = Math.round((at - this.#base[p]) * US)
      if (offset >= 0 && offset <= MAX_OFFSET) page[j * 2] = offset
      else this.#widen()[p][j] = at
    }
    this.#count = i + 1
    if (!exact) this.#allExact = false
  }

  at(i: number): number {
    const p = i >>> PAGE_BITS
    if (this.#exact !== undefined) return this.#exact[p][i & MASK]
    return this.#base[p] + this.#pages[p][(i & MASK) * 2] / US
  }

  tokens(i: number): number {
    return this.#mark(i) & MAX_MARK_TOKENS
  }

  kind(i: number): MarkKind {
    return (this.#mark(i) >>> KIND_SHIFT) as MarkKind
  }

  /** An independent copy (the measuring policy rewrites a copy's token counts, never the exchange's log). */
  copy(): ChunkLog {
    const c = new ChunkLog()
    c.#base = [...this.#base]
    c.#pages = this.#pages.map((page) => page.slice())
    c.#stride = this.#stride
    c.#exact = this.#exact?.map((times) => times.slice())
    c.#count = this.#count
    c.#allExact = this.#allExact
    return c
  }

  /** Replace every chunk's token count (after reconciling with the provider's usage). */
  setTokens(i: number, tokens: number): void {
    const page = this.#pages[i >>> PAGE_BITS]
    const k = (i & MASK) * this.#stride + this.#stride - 1
    page[k] = stored(tokens) | (page[k] & ~MAX_MARK_TOKENS)
  }

  #mark(i: number): number {
    return this.#pages[i >>> PAGE_BITS][(i & MASK) * this.#stride + this.#stride - 1]
  }

  /** Room for mark `p << PAGE_BITS`…: a new page, or the first page doubled. */
  #grow(p: number): Uint32Array {
    const old = this.#pages[p]
    const marks = old === undefined ? (p === 0 ? FIRST : PAGE) : (old.length / this.#stride) * 2
    const page = new Uint32Array(marks * this.#stride)
    if (old !== undefined) page.set(old)
    if (old !== undefined) this.#pages[p] = page
    else if (p === 0) this.#pages = [page]
    else this.#pages.push(page)
    if (this.#exact !== undefined) {
      const exact = new Float64Array(marks)
      if (old !== undefined) {
        exact.set(this.#exact[p])
        this.#exact[p] = exact
      } else this.#exact.push(exact)
    }
    return page
  }

  /** Switches every page to exact Float64 times beside the marks; returns the times. */
  #widen(): Float64Array[] {
    const exact: Float64Array[] = []
    const pages: Uint32Array[] = []
    for (let p = 0; p < this.#pages.length; p++) {
      const old = this.#pages[p]
      const marks = new Uint32Array(old.length / 2)
      for (let j = 0; j < marks.length; j++) marks[j] = old[j * 2 + 1]
      const times = new Float64Array(marks.length)
      const base = this.#base[p]
      // Times of this page written so far (the current one is written by the caller).
      const n = Math.min(marks.length, this.#count - (p << PAGE_BITS))
      for (let j = 0; j < n; j++) times[j] = base + old[j * 2] / US
      pages.push(marks)
      exact.push(times)
    }
    this.#pages = pages
    this.#stride = 1
    this.#exact = exact
    this.#base = []
    return exact
  }
}
