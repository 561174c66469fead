import { countTokens as countO200k } from 'gpt-tokenizer/encoding/o200k_base'
import { countTokens as countCl100k } from 'gpt-tokenizer/encoding/cl100k_base'
import { ownCopy } from '../parsers/bytes.ts'

/** Token counts for generated text with a real BPE tokenizer, used only where the provider gives no count. */

export const Encoding = { o200k_base: 'o200k_base', cl100k_base: 'cl100k_base' } as const
export type Encoding = (typeof Encoding)[keyof typeof Encoding]

export interface EncodingRule {
  readonly pattern: string
  readonly encoding: Encoding
}

/** Models that use cl100k_base (GPT-4 before 4o, GPT-3.5, the older embeddings); everything else gets o200k_base. */
export const DEFAULT_ENCODING_RULES: readonly EncodingRule[] = [
  { pattern: '^(gpt-4(?!o|\\.\\d)|gpt-3\\.5|text-embedding-(ada|3))', encoding: Encoding.cl100k_base },
]

/** Deltas are short and repeat (" the", "\n"): a count is worth remembering below this length. */
const MEMO_MAX_CHARS = 48
const MEMO_MAX_ENTRIES = 50_000
/** Beyond this a chunk is counted on a prefix and scaled, so one huge delta cannot stall the event loop. */
export const EXACT_MAX_CHARS = 8192
/** BPE is quadratic in a pre-token's length (a run without whitespace), so longer runs are estimated from their head. */
const RUN_MAX_CHARS = 64
const LONG_RUN = new RegExp(`[\\p{L}\\p{M}]{${RUN_MAX_CHARS + 1},}|[^\\s\\p{L}\\p{N}]{${RUN_MAX_CHARS + 1},}`, 'gu')

// Special-token text in an answer (e.g. "<|endoftext|>") is ordinary text to us, never an error.
const ORDINARY = { disallowedSpecial: new Set<string>() }

const raw: Record<Encoding, (text: string) => number> = {
  o200k_base: (text) => countO200k(text, ORDINARY),
  cl100k_base: (text) => countCl100k(text, ORDINARY),
}

export type TokenCount = (text: string) => number

/** `count` with every run of letters (or of punctuation) longer than RUN_MAX_CHARS estimated from its head. */
function sliced(count: (text: string) => number): (text: string) => number {
  return (text) => {
    if (text.length <= RUN_MAX_CHARS) return count(text)
    LONG_RUN.lastIndex = 0
    let m = LONG_RUN.exec(text)
    if (m === null) return count(text)
    let n = 0
    let from = 0
    while (m !== null) {
      if (m.index > from) n += count(text.slice(from, m.index))
      const run = m[0]
      n += Math.max(1, Math.round((count(run.slice(0, RUN_MAX_CHARS)) * run.length) / RUN_MAX_CHARS))
      from = m.index + run.length
      m = LONG_RUN.exec(text)
    }
    if (from < text.length) n += count(text.slice(from))
    return n
  }
}

function memoised(count: (text: string) => number): TokenCount {
  let memo = new Map<string, number>()
  return (text) => {
    const length = text.length
    if (length === 0) return 0
    if (length <= MEMO_MAX_CHARS) {
      const hit = memo.get(text)
      if (hit !== undefined) return hit
      const n = count(text)
      if (memo.size >= MEMO_MAX_ENTRIES) memo = new Map()
      // A delta is often a slice of the event's text: the key must not keep that alive.
      memo.set(ownCopy(text), n)
      return n
    }
    if (length <= EXACT_MAX_CHARS) return count(text)
    const head = count(text.slice(0, EXACT_MAX_CHARS))
    return Math.max(1, Math.round((head * length) / EXACT_MAX_CHARS))
  }
}

const counters: Record<Encoding, TokenCount> = {
  o200k_base: memoised(sliced(raw.o200k_base)),
  cl100k_base: memoised(sliced(raw.cl100k_base)),
}

/**
 * V8 compiles the pre-tokenizer's regex once for one-byte and once for two-byte strings: warming
 * both keeps that cost out of the first request's read budget (docs/performance.md).
 */
const WARM_TEXTS = ['Hi there, friend: 12 words\n', " it's", 'naïve café', 'Wärme — 東京 «ok»', ' 日本語']
let warmed = false

/** Runs every tokenizer through its cold start once, before the listeners open, so the first request counts exactly. */
export function warmTokenizers(now: () => number): void {
  if (warmed) return
  warmed = true
  for (const count of Object.values(raw))
    for (let i = 0; i < 3; i++) for (const text of WARM_TEXTS) count(i === 0 ? text : `${text}${i}`)
  // The request path too (ReadBudget on the requests' clock): its first calls would eat a first read's budget.
  const long = WARM_TEXTS.join(' ').repeat(4)
  for (const encoding of Object.values(Encoding)) {
    const budget = new ReadBudget(counters[encoding], now)
    for (let i = 0; i < 3; i++) {
      budget.newRead()
      for (const text of WARM_TEXTS) budget.count(`${text}${i}`)
      budget.count(`${long}${i}`)
    }
  }
}

/** Event-loop time one read's counting may take (ms) before the rest is estimated; see docs/performance.md. */
export const READ_BUDGET_MS = 0.3
/** Text is counted in slices of about this many characters, so the budget is checked often. */
const SLICE_CHARS = 64
/** A slice ends before a space up to this far; past it (no space in sight) it is cut at SLICE_CHARS. */
const SLICE_MAX_CHARS = 96
/**
 * The most one slice is charged (ms): a slice that took longer was preempted (a GC, another process),
 * and one such pause must not turn the rest of a short read into an estimate.
 */
const SLICE_CHARGE_MAX_MS = READ_BUDGET_MS / 2

const isSpace = (c: number): boolean => c === 32 || c === 10 || c === 13 || c === 9
const isAsciiLetter = (c: number): boolean => (c >= 65 && c <= 90) || (c >= 97 && c <= 122)
/** ASCII punctuation that starts a pre-token after a word (not an apostrophe: `'s` belongs to the word). */
const isCut = (c: number): boolean =>
  (c >= 33 && c <= 47 && c !== 39) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)

/** Where the slice from `from` ends: where BPE's pre-tokenizer cuts anyway, so the slices' counts add up to the whole's. */
function sliceEnd(text: string, from: number): number {
  const target = from + SLICE_CHARS
  if (target >= text.length) return text.length
  const last = Math.min(text.length - 1, from + SLICE_MAX_CHARS)
  for (let j = target; j < last; j++) {
    if (text.charCodeAt(j) === 32 && !isSpace(text.charCodeAt(j - 1)) && !isSpace(text.charCodeAt(j + 1))) return j
  }
  for (let j = target; j < last; j++) if (isAsciiLetter(text.charCodeAt(j - 1)) && isCut(text.charCodeAt(j))) return j
  // Never between the two halves of a surrogate pair.
  return (text.charCodeAt(target) & 0xfc00) === 0xdc00 ? target + 1 : target
}

/**
 * One request's counting under a per-read budget of tokenizer time: past READ_BUDGET_MS the rest of
 * the read is estimated from this request's tokens per character, so counting never makes the gaps
 * the proxy measures (bench/lab/tokenizer-stall.ts). A provider's usage still sets the final total.
 */
export class ReadBudget {
  readonly #count: TokenCount
  readonly #now: () => number
  /** ms the tokenizer took in the current read; undefined before the first read. */
  #used: number | undefined
  #chars = 0
  #tokens = 0
  /** Tokens estimated linearly, over the whole request. */
  estimated = 0

  constructor(count: TokenCount, now: () => number) {
    this.#count = count
    this.#now = now
  }

  /** A new read from the upstream: the budget starts again. */
  newRead(): void {
    this.#used = 0
  }

  readonly count = (text: string): number => {
    if (this.#used === undefined) this.newRead()
    const length = text.length
    if (length === 0) return 0
    if (length <= SLICE_MAX_CHARS) return this.#spent() ? this.#estimate(length, true) : this.#exact(text)
    let n = 0
    for (let i = 0; i < length; ) {
      if (this.#spent()) return n + this.#estimate(length - i, n === 0)
      const end = sliceEnd(text, i)
      n += this.#exact(text.slice(i, end))
      i = end
    }
    return n
  }

  /** The read's budget is spent (and there is a ratio to estimate with). */
  #spent(): boolean {
    return this.#chars > 0 && (this.#used as number) > READ_BUDGET_MS
  }

  #exact(text: string): number {
    const start = this.#now()
    const n = this.#count(text)
    this.#used = (this.#used as number) + Math.min(this.#now() - start, SLICE_CHARGE_MAX_MS)
    this.#chars += text.length
    this.#tokens += n
    return n
  }

  #estimate(chars: number, whole: boolean): number {
    const n = Math.round((this.#tokens * chars) / this.#chars)
    const tokens = whole ? Math.max(1, n) : n
    this.estimated += tokens
    return tokens
  }
}

/** @internal The counter for an encoding (shared, memoised): tests and benchmarks count with it. */
export function counterFor(encoding: Encoding): TokenCount {
  return counters[encoding]
}

/** Picks the encoding for a model name from ordered rules; the first match wins. */
export class EncodingSelector {
  readonly #rules: readonly { re: RegExp; encoding: Encoding }[]
  readonly #fallback: Encoding
  readonly #cache = new Map<string, Encoding>()

  constructor(rules: readonly EncodingRule[], fallback: Encoding = Encoding.o200k_base) {
    this.#rules = rules.map((r) => ({ re: new RegExp(r.pattern, 'i'), encoding: r.encoding }))
    this.#fallback = fallback
  }

  encodingFor(model: string | undefined): Encoding {
    if (model === undefined) return this.#fallback
    let e = this.#cache.get(model)
    if (e === undefined) {
      e = this.#rules.find((r) => r.re.test(model))?.encoding ?? this.#fallback
      if (this.#cache.size < 10_000) this.#cache.set(model, e)
    }
    return e
  }

  counterFor(model: string | undefined): TokenCount {
    return counters[this.encodingFor(model)]
  }
}
