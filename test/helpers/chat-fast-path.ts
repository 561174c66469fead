import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import type { ContentEvent, ParserContext, StreamSummary } from '../../src/parsers/types.ts'
import { counterFor } from '../../src/tokens/tokenizer.ts'

/**
 * For tests of the OpenAI chat parser's fast path (`scan()`: the learned event template): the
 * same parser with it switched off, one that counts the events it read, and a run of reads.
 */

/** The same parser with the fast path switched off: every event takes JSON.parse. */
export class FullParseOnly extends OpenAIChatParser {
  protected override scan(): boolean {
    return false
  }
}

/** Counts the events the fast path read. */
export class Counting extends OpenAIChatParser {
  matched = 0
  protected override scan(event: string, data: string): boolean {
    const handled = super.scan(event, data)
    if (handled) this.matched++
    return handled
  }
}

export const chatContext = (): ParserContext => ({ countTokens: counterFor('o200k_base'), path: '/v1/chat/completions', contentType: 'text/event-stream', maxEventBytes: 1 << 20 })

export interface Run {
  reads: ContentEvent[][]
  summary: StreamSummary
}

/** Feeds the reads in order: the events each read completed, and the summary (as JSON sees it). */
export function run(parser: OpenAIChatParser, parts: Uint8Array[]): Run {
  const reads = parts.map((p) => [...parser.push(p)])
  return { reads, summary: JSON.parse(JSON.stringify(parser.end())) as StreamSummary }
}
