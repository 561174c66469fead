import type { ContentEvent, ParserContext, StreamParser, StreamSummary } from '../../src/parsers/types.ts'
import { Encoding, counterFor } from '../../src/tokens/tokenizer.ts'
import { feed as feedPieces, parserContext as contextWith, piecesAt } from './feed.ts'
import { fixture as recorded, sseFromDataLines } from './fixtures.ts'
import { sseEvents } from './upstream.ts'
import { createRng } from '../../src/sim/rng.ts'

/**
 * Feeding recorded streams to a parser whole and split at byte offsets, for fixture tests.
 * Recorders lost the original read boundaries, so a parser must give the same events and the
 * same summary wherever the reads are cut.
 */

/** A recorded stream's bytes. `.data.jsonl` files (SSE data payloads, one a line) get their SSE framing back, without `[DONE]`. */
export function fixture(name: string): Buffer {
  return name.endsWith('.data.jsonl') ? sseFromDataLines(name, false) : recorded(name)
}

/** The JSON payloads of an SSE body, found with a regex split, not the decoder under test. */
export function ssePayloads(body: Buffer): unknown[] {
  const out: unknown[] = []
  for (const event of sseEvents(body.toString('utf8'))) {
    const data = event
      .split(/\r\n|\r|\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''))
    if (data.length === 0 || data[0] === '[DONE]') continue
    out.push(JSON.parse(data.join('\n')))
  }
  return out
}

export const countTokens = counterFor(Encoding.o200k_base)

export function parserContext(path: string, contentType: string, maxEventBytes = 1 << 20): ParserContext {
  return contextWith({ path, contentType, maxEventBytes, countTokens })
}

export interface FeedResult {
  readonly events: ContentEvent[]
  readonly summary: StreamSummary
}

/** Feeds `bytes` cut at the given offsets (ascending) to a new parser, each read a copy (feed.ts). */
export function feed(make: () => StreamParser, bytes: Buffer, cuts: readonly number[] = []): FeedResult {
  const { events, summary } = feedPieces(
    make(),
    piecesAt(bytes, cuts).filter((p) => p.length > 0),
  )
  return { events, summary }
}

/**
 * The ways to cut a body: every single offset for small bodies (a sample of `sample` offsets for
 * big ones), one byte a read, and `random` runs of random read sizes.
 */
function cutPlans(length: number, { everyUpTo = 6000, sample = 600, random = 20 } = {}): number[][] {
  const plans: number[][] = []
  const next = createRng(length)
  if (length <= everyUpTo) for (let i = 1; i < length; i++) plans.push([i])
  else {
    // Each run re-reads the whole body: keep the sample to ~30 MB of parsing per fixture.
    const runs = Math.min(sample, Math.ceil(30e6 / length))
    for (let i = 0; i < runs; i++) plans.push([1 + Math.floor(next() * (length - 1))])
  }
  plans.push(Array.from({ length: Math.max(0, length - 1) }, (_, i) => i + 1))
  for (let r = 0; r < random; r++) {
    const cuts: number[] = []
    for (let at = 0; ; ) {
      at += 1 + Math.floor(next() * 200)
      if (at >= length) break
      cuts.push(at)
    }
    plans.push(cuts)
  }
  return plans
}

/** How many split runs gave different events or summary than the whole body (0 is the goal), and the first such plan. */
export function splitDifferences(make: () => StreamParser, bytes: Buffer, whole: FeedResult): { runs: number; differing: number; first?: number[] } {
  const want = JSON.stringify(whole)
  let differing = 0
  let first: number[] | undefined
  const plans = cutPlans(bytes.length)
  for (const cuts of plans) {
    if (JSON.stringify(feed(make, bytes, cuts)) !== want) {
      differing++
      first ??= cuts.length > 10 ? [...cuts.slice(0, 10), -1] : cuts
    }
  }
  return { runs: plans.length, differing, first }
}

/** Number of events, by kind. */
export function countByKind(events: readonly ContentEvent[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const e of events) out[e.kind] = (out[e.kind] ?? 0) + 1
  return out
}
