/**
 * The arrival marks of one response's content chunks: time (ms, monotonic), tokens, kind.
 * Compact typed arrays that grow by doubling, so a long stream costs ~13 bytes a chunk.
 */

export const MarkKind = { text: 0, reasoning: 1, tool: 2 } as const
export type MarkKind = (typeof MarkKind)[keyof typeof MarkKind]

const INITIAL = 32

export class ChunkLog {
  #at = new Float64Array(INITIAL)
  #tokens = new Uint32Array(INITIAL)
  #kind = new Uint8Array(INITIAL)
  #count = 0
  /** Whether every count came from the provider (else some are tokenizer estimates). */
  #allExact = true

  get count(): number {
    return this.#count
  }

  get allExact(): boolean {
    return this.#allExact
  }

  add(at: number, tokens: number, kind: MarkKind, exact: boolean): void {
    const i = this.#count
    if (i === this.#at.length) this.#grow()
    this.#at[i] = at
    this.#tokens[i] = tokens
    this.#kind[i] = kind
    this.#count = i + 1
    if (!exact) this.#allExact = false
  }

  at(i: number): number {
    return this.#at[i]
  }

  tokens(i: number): number {
    return this.#tokens[i]
  }

  kind(i: number): MarkKind {
    return this.#kind[i] as MarkKind
  }

  /** Replace every chunk's token count (after reconciling with the provider's usage). */
  setTokens(i: number, tokens: number): void {
    this.#tokens[i] = tokens
  }

  #grow(): void {
    const n = this.#at.length * 2
    const at = new Float64Array(n)
    at.set(this.#at)
    const tokens = new Uint32Array(n)
    tokens.set(this.#tokens)
    const kind = new Uint8Array(n)
    kind.set(this.#kind)
    this.#at = at
    this.#tokens = tokens
    this.#kind = kind
  }
}
