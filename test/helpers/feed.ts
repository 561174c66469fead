import { counterFor } from '../../src/tokens/tokenizer.ts'
import type { ContentEvent, ParserContext, StreamParser, StreamSummary } from '../../src/parsers/types.ts'

/** Feeding recorded streams to a parser whole, split at one byte, or split everywhere. */

export { fixture, splitOffsets, sseFromDataLines } from './fixtures.ts'

export function parserContext(overrides: Partial<ParserContext> = {}): ParserContext {
  return { countTokens: counterFor('o200k_base'), path: '/', contentType: '', maxEventBytes: 1 << 20, ...overrides }
}

export interface Fed {
  readonly events: ContentEvent[]
  readonly summary: StreamSummary
  /** Index of the read that completed each event. */
  readonly reads: number[]
}

/** Feeds `bytes` in the given pieces. Events are copied as they come, so a parser that changes one it returned earlier is caught. */
export function feed(parser: StreamParser, pieces: readonly Uint8Array[]): Fed {
  const events: ContentEvent[] = []
  const reads: number[] = []
  pieces.forEach((p, i) => {
    for (const e of parser.push(p)) {
      events.push({ ...e })
      reads.push(i)
    }
  })
  return { events, reads, summary: parser.end() }
}

/** Splits `bytes` at the given offsets (copies, so no piece shares memory with another). */
export function splitAt(bytes: Buffer, ...offsets: number[]): Buffer[] {
  return piecesAt(bytes, offsets)
}

/** `splitAt` for an array of offsets (any length: a byte-by-byte plan has one per byte). */
export function piecesAt(bytes: Buffer, offsets: readonly number[]): Buffer[] {
  const out: Buffer[] = []
  let last = 0
  for (const o of [...offsets, bytes.length]) {
    out.push(Buffer.from(bytes.subarray(last, o)))
    last = o
  }
  return out
}

/** Plain totals of a run, for comparing runs. */
export function totals(fed: Fed): { count: number; tokens: number; kinds: string } {
  return {
    count: fed.events.length,
    tokens: fed.events.reduce((n, e) => n + e.tokens, 0),
    kinds: fed.events.map((e) => e.kind[0]).join(''),
  }
}
