import { SseJsonParser } from './sse-json-parser.ts'
import { ContentKind } from './types.ts'
import type { StreamSummary, Usage } from './types.ts'
import { isObject, nonEmpty, readCount } from './json.ts'
import type { Json } from './json.ts'
import { readOpenAIDetails, readVllmMetrics } from './openai-usage.ts'

/**
 * OpenAI Responses API streams: https://platform.openai.com/docs/api-reference/responses-streaming
 * Events are dispatched on the JSON `type`, not the SSE `event:` line, which OpenRouter omits.
 */

/** Event type → kind of the content its `delta` carries. */
const CONTENT: ReadonlyMap<string, ContentKind> = new Map([
  ['response.output_text.delta', ContentKind.text],
  ['response.refusal.delta', ContentKind.text],
  ['response.reasoning_text.delta', ContentKind.reasoning],
  ['response.reasoning_summary_text.delta', ContentKind.reasoning],
  ['response.function_call_arguments.delta', ContentKind.tool],
  ['response.custom_tool_call_input.delta', ContentKind.tool],
  ['response.mcp_call_arguments.delta', ContentKind.tool],
  ['response.code_interpreter_call_code.delta', ContentKind.tool],
])

/** `usage` of a response object: `{input_tokens, input_tokens_details.cached_tokens, output_tokens, output_tokens_details.reasoning_tokens}`. */
function responsesUsage(usage: unknown, summary: StreamSummary): Usage | undefined {
  if (!isObject(usage)) return undefined
  const u: Usage = {}
  const output = readCount(usage.output_tokens, summary, 'output_tokens')
  if (output !== undefined) u.output = output
  const input = readCount(usage.input_tokens, summary, 'input_tokens')
  if (input !== undefined) u.input = input
  readOpenAIDetails(usage, u, summary)
  return u
}

/** The error code of a failed response object or an `error` event's `error`, else undefined. */
function errorName(error: unknown): string | undefined {
  if (!isObject(error)) return undefined
  return String(error.code ?? error.type ?? error.message ?? 'error')
}

/** Model, usage and error of a whole Responses API object (`response`), streamed or not. */
function readResponse(response: Json, summary: StreamSummary): void {
  if (summary.model === undefined && nonEmpty(response.model)) summary.model = response.model
  const usage = responsesUsage(response.usage, summary)
  if (usage !== undefined) summary.usage = usage
  if (response.status === 'failed') summary.error ??= errorName(response.error) ?? 'response.failed'
  // vLLM's Responses API carries its per-request metrics on the final response object.
  if (isObject(response.metrics)) readVllmMetrics(response.metrics, summary)
}

export class OpenAIResponsesParser extends SseJsonParser {
  protected onJson(event: string, value: unknown): void {
    if (!isObject(value)) return
    const type = typeof value.type === 'string' ? value.type : event
    const kind = CONTENT.get(type)
    if (kind !== undefined) {
      if (nonEmpty(value.delta))
        this.emit({ kind, tokens: Math.max(1, this.ctx.countTokens(value.delta)), exact: false })
      return
    }
    if (isObject(value.response)) {
      readResponse(value.response, this.summary)
      if (type === 'response.failed') this.summary.error ??= 'response.failed'
      return
    }
    if (type === 'error' || isObject(value.error)) {
      this.summary.error ??= errorName(value.error) ?? errorName(value) ?? 'error'
    }
  }
}

/** Usage, model and error of a non-streamed Responses API answer (or an OpenAI error body). */
export function summarizeResponsesBody(value: unknown): StreamSummary {
  const summary: StreamSummary = {}
  if (!isObject(value)) return summary
  readResponse(value, summary)
  return summary
}
