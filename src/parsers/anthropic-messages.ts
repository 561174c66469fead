import { SseJsonParser } from './sse-json-parser.ts'
import { ContentKind, usageOf } from './types.ts'
import type { StreamSummary, Usage } from './types.ts'
import { isObject, nonEmpty, readCount } from './json.ts'
import type { Json } from './json.ts'

/**
 * Anthropic Messages streams (also Vertex AI's `:streamRawPredict`): https://docs.anthropic.com/en/docs/build-with-claude/streaming
 * Input is `input_tokens` plus both cache counts; `message_delta.usage` is cumulative and final, so its
 * input fields, where repeated, replace `message_start`'s.
 */

/** The three input-side counts Anthropic reports separately; the last value of each wins. */
interface InputParts {
  input?: number
  cacheRead?: number
  cacheCreation?: number
  /** `cache_creation.ephemeral_1h_input_tokens`: the part of the writes kept for an hour. */
  cacheCreation1h?: number
}

function readInput(usage: Json, parts: InputParts, summary: StreamSummary): void {
  const input = readCount(usage.input_tokens, summary, 'input_tokens')
  if (input !== undefined) parts.input = input
  const cacheRead = readCount(usage.cache_read_input_tokens, summary, 'cache_read_input_tokens')
  if (cacheRead !== undefined) parts.cacheRead = cacheRead
  const cacheCreation = readCount(usage.cache_creation_input_tokens, summary, 'cache_creation_input_tokens')
  if (cacheCreation !== undefined) parts.cacheCreation = cacheCreation
  const tiers = usage.cache_creation
  const oneHour = isObject(tiers)
    ? readCount(tiers.ephemeral_1h_input_tokens, summary, 'ephemeral_1h_input_tokens')
    : undefined
  if (oneHour !== undefined) parts.cacheCreation1h = oneHour
}

/** The input total (the three parts summed) and the cache read and write counts, as reported. */
function applyInput(parts: InputParts, u: Usage): void {
  if (parts.input === undefined && parts.cacheRead === undefined && parts.cacheCreation === undefined) return
  u.input = (parts.input ?? 0) + (parts.cacheRead ?? 0) + (parts.cacheCreation ?? 0)
  if (parts.cacheRead !== undefined) u.cacheRead = parts.cacheRead
  if (parts.cacheCreation !== undefined) u.cacheWrite = parts.cacheCreation
  if (parts.cacheCreation1h !== undefined) u.cacheWrite1h = Math.min(parts.cacheCreation1h, parts.cacheCreation ?? 0)
}

function errorName(value: Json): string {
  const error = isObject(value.error) ? value.error : value
  return String(error.type ?? error.message ?? 'error')
}

export class AnthropicMessagesParser extends SseJsonParser {
  readonly #input: InputParts = {}

  protected onJson(event: string, value: unknown): void {
    if (!isObject(value)) return
    const type = typeof value.type === 'string' ? value.type : event
    switch (type) {
      case 'content_block_delta':
        this.#delta(value.delta)
        return
      case 'message_start': {
        const message = value.message
        if (!isObject(message)) return
        if (this.summary.model === undefined && nonEmpty(message.model)) this.summary.model = message.model
        if (isObject(message.usage)) this.#usage(message.usage, false)
        return
      }
      case 'message_delta':
        if (isObject(value.usage)) this.#usage(value.usage, true)
        return
      case 'error':
        this.summary.error ??= errorName(value)
        return
      default:
        if (event === 'error') this.summary.error ??= errorName(value)
    }
  }

  #delta(delta: unknown): void {
    if (!isObject(delta)) return
    let kind: ContentKind
    let text: unknown
    switch (delta.type) {
      case 'text_delta':
        kind = ContentKind.text
        text = delta.text
        break
      case 'thinking_delta':
        kind = ContentKind.reasoning
        text = delta.thinking
        break
      case 'input_json_delta':
        kind = ContentKind.tool
        text = delta.partial_json
        break
      default:
        return // signature_delta, citations_delta: no generated output of their own
    }
    if (nonEmpty(text)) this.emitText(kind, text)
  }

  #usage(usage: Json, final: boolean): void {
    readInput(usage, this.#input, this.summary)
    const u = usageOf(this.summary)
    applyInput(this.#input, u)
    // message_start's output_tokens is a placeholder (1–5); only message_delta's is a count.
    const output = final ? readCount(usage.output_tokens, this.summary, 'output_tokens') : undefined
    if (output !== undefined) u.output = output
  }
}

/** Usage and model of a non-streamed Messages answer (`{"type":"message",…}`) or an error body. */
export function summarizeAnthropicBody(value: unknown): StreamSummary {
  const summary: StreamSummary = {}
  if (!isObject(value)) return summary
  if (value.type === 'error') summary.error = errorName(value)
  if (nonEmpty(value.model)) summary.model = value.model
  const usage = value.usage
  if (isObject(usage)) {
    const parts: InputParts = {}
    readInput(usage, parts, summary)
    const u: Usage = {}
    applyInput(parts, u)
    const output = readCount(usage.output_tokens, summary, 'output_tokens')
    if (output !== undefined) u.output = output
    summary.usage = u
  }
  return summary
}
