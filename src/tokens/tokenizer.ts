import { countTokens as countO200k } from 'gpt-tokenizer/encoding/o200k_base'
import { countTokens as countCl100k } from 'gpt-tokenizer/encoding/cl100k_base'
import { ownCopy } from '../parsers/bytes.ts'

/**
 * Token estimates for generated text, with a real BPE tokenizer per model family.
 * Only used where the provider gives no per-chunk count; a provider's usage always wins.
 */

export const Encoding = { o200k_base: 'o200k_base', cl100k_base: 'cl100k_base' } as const
export type Encoding = (typeof Encoding)[keyof typeof Encoding]

export interface EncodingRule {
  readonly pattern: string
  readonly encoding: Encoding
}

/** Models that use cl100k_base (GPT-4 before 4o, GPT-3.5, the older embeddings); everything else gets o200k_base. */
export const DEFAULT_ENCODING_RULES: readonly EncodingRule[] = [{ pattern: '^(gpt-4(?!o|\\.\\d)|gpt-3\\.5|text-embedding-(ada|3))', encoding: Encoding.cl100k_base }]

/** Deltas are short and repeat (" the", "\n"): a count is worth remembering below this length. */
const MEMO_MAX_CHARS = 48
const MEMO_MAX_ENTRIES = 50_000
/** Beyond this a chunk is counted on a prefix and scaled, so one huge delta cannot stall the event loop. */
export const EXACT_MAX_CHARS = 8192

// Special-token text in an answer (e.g. "<|endoftext|>") is ordinary text to us, never an error.
const ORDINARY = { disallowedSpecial: new Set<string>() }

const raw: Record<Encoding, (text: string) => number> = {
  o200k_base: (text) => countO200k(text, ORDINARY),
  cl100k_base: (text) => countCl100k(text, ORDINARY),
}

export type TokenCount = (text: string) => number

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
  o200k_base: memoised(raw.o200k_base),
  cl100k_base: memoised(raw.cl100k_base),
}

/** The counter for an encoding (shared, memoised). */
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
