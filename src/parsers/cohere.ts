import { isObject, nonEmpty, readCount } from './json.ts'
import type { Json } from './json.ts'
import { SseJsonParser } from './sse-json-parser.ts'
import { ContentKind, usageOf } from './types.ts'
import type { StreamSummary } from './types.ts'

/**
 * Cohere Chat API v2 (`POST /v2/chat`): https://docs.cohere.com/v2/docs/streaming
 * A `tool-plan-delta` (the plan written before calling tools) counts as reasoning.
 */

/** Usage of a Cohere `usage` object: `tokens` (what the model read and wrote) first, else `billed_units`. */
function readUsage(usage: unknown, summary: StreamSummary): void {
  if (!isObject(usage)) return
  const tokens = isObject(usage.tokens) ? usage.tokens : {}
  const billed = isObject(usage.billed_units) ? usage.billed_units : {}
  const output =
    readCount(tokens.output_tokens, summary, 'output_tokens') ??
    readCount(billed.output_tokens, summary, 'billed output_tokens')
  const input =
    readCount(tokens.input_tokens, summary, 'input_tokens') ??
    readCount(billed.input_tokens, summary, 'billed input_tokens')
  if (output !== undefined) usageOf(summary).output = output
  if (input !== undefined) usageOf(summary).input = input
}

/** The `message` inside an event's `delta`, where every Cohere v2 event keeps its payload. */
function deltaMessage(value: Json): Json | undefined {
  return isObject(value.delta) && isObject(value.delta.message) ? value.delta.message : undefined
}

/** One Cohere v2 chat stream. */
export class CohereChatParser extends SseJsonParser {
  protected onJson(event: string, value: unknown): void {
    if (!isObject(value)) return
    const type = typeof value.type === 'string' ? value.type : event
    switch (type) {
      case 'content-delta': {
        const content = deltaMessage(value)?.content
        if (!isObject(content)) return
        if (nonEmpty(content.text)) this.emitText(ContentKind.text, content.text)
        else if (nonEmpty(content.thinking)) this.emitText(ContentKind.reasoning, content.thinking)
        return
      }
      case 'tool-plan-delta': {
        const plan = deltaMessage(value)?.tool_plan
        if (nonEmpty(plan)) this.emitText(ContentKind.reasoning, plan)
        return
      }
      case 'tool-call-delta': {
        const calls = deltaMessage(value)?.tool_calls
        const args = isObject(calls) && isObject(calls.function) ? calls.function.arguments : undefined
        if (nonEmpty(args)) this.emitText(ContentKind.tool, args)
        return
      }
      case 'message-end': {
        const delta = value.delta
        if (!isObject(delta)) return
        readUsage(delta.usage, this.summary)
        if (nonEmpty(delta.error)) this.summary.error ??= delta.error
        return
      }
    }
  }
}

/** Usage of a whole answer or an error body (which the status already marks). */
export function summarizeCohereBody(value: unknown): StreamSummary {
  const summary: StreamSummary = {}
  if (isObject(value)) readUsage(value.usage, summary)
  return summary
}
