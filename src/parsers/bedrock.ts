import { EventStreamDecoder } from './eventstream-decoder.ts'
import type { EventFrame } from './eventstream-decoder.ts'
import { DecodedParser } from './decoded-parser.ts'
import { ContentKind, usageOf } from './types.ts'
import type { ParserContext, StreamSummary } from './types.ts'
import { isObject, nonEmpty, readCount } from './json.ts'
import { ReportedPhase, Unit, reportTime } from './reported-times.ts'
import type { Json } from './json.ts'

/**
 * AWS Bedrock Runtime eventstream responses:
 * https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html and
 * https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModelWithResponseStream.html
 * (base64 model-native chunks). `firstByteLatency` counts as prompt time since Bedrock reports no queue
 * or load apart (https://docs.aws.amazon.com/bedrock/latest/userguide/monitoring-cw.html).
 */

/** The model id in a Bedrock Runtime path, URL-decoded (`us.amazon.nova-micro-v1%3A0` → `…:0`). */
export function bedrockModelFromPath(path: string): string | undefined {
  const m = /^\/model\/([^/]+)\/(?:converse|converse-stream|invoke|invoke-with-response-stream)$/.exec(path)
  if (m === null) return undefined
  try {
    return decodeURIComponent(m[1])
  } catch {
    return m[1]
  }
}

/** Sets a usage field from a reported count when it is one (else notes the parse error). */
function setCount(
  summary: StreamSummary,
  field: 'input' | 'output' | 'cacheRead' | 'cacheWrite',
  value: unknown,
  name: string,
): void {
  const n = readCount(value, summary, name)
  if (n !== undefined) usageOf(summary)[field] = n
}

/**
 * Converse's `inputTokens` excludes cached tokens, so input is the sum: cached input is always part of
 * the input count. https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html
 */
function converseUsage(usage: Json, summary: StreamSummary): void {
  setCount(summary, 'output', usage.outputTokens, 'outputTokens')
  const read = readCount(usage.cacheReadInputTokens, summary, 'cacheReadInputTokens')
  const write = readCount(usage.cacheWriteInputTokens, summary, 'cacheWriteInputTokens')
  const u = usageOf(summary)
  if (read !== undefined) u.cacheRead = read
  if (write !== undefined) u.cacheWrite = write
  const input = readCount(usage.inputTokens, summary, 'inputTokens')
  if (input !== undefined) u.input = input + (read ?? 0) + (write ?? 0)
}

/** Usage from a Converse answer (`usage.inputTokens`) or a model-native InvokeModel body. */
export function summarizeBedrockBody(value: unknown): StreamSummary {
  const summary: StreamSummary = {}
  if (!isObject(value)) return summary
  if (nonEmpty(value.model)) summary.model = value.model
  const u = value.usage
  if (isObject(u)) {
    converseUsage(u, summary)
    setCount(summary, 'output', u.output_tokens, 'output_tokens')
    setCount(summary, 'input', u.input_tokens, 'input_tokens')
  }
  if (isObject(value.metrics)) reportTime(summary, ReportedPhase.total, value.metrics.latencyMs, Unit.ms)
  // Llama / Titan InvokeModel answers.
  setCount(summary, 'output', value.generation_token_count, 'generation_token_count')
  setCount(summary, 'input', value.prompt_token_count, 'prompt_token_count')
  return summary
}

/** One Bedrock eventstream response (ConverseStream or InvokeModelWithResponseStream). */
export class BedrockParser extends DecodedParser {
  readonly #decoder: EventStreamDecoder
  readonly #onFrame = (frame: EventFrame): void => this.#frame(frame)
  readonly #onError = (reason: string): void => this.fail(reason)

  constructor(ctx: ParserContext) {
    super(ctx)
    this.#decoder = new EventStreamDecoder(ctx.maxEventBytes)
  }

  protected decode(chunk: Uint8Array): void {
    this.#decoder.push(chunk, this.#onFrame, this.#onError)
  }

  protected flush(): void {
    this.#decoder.end(this.#onError)
  }

  #frame(frame: EventFrame): void {
    if (this.failed) return
    const h = frame.headers
    const type = h[':message-type']
    if (type === 'exception' || type === 'error') {
      this.summary.error = h[':exception-type'] ?? h[':error-code'] ?? type
      return
    }
    let value: unknown
    try {
      value = JSON.parse(frame.payload.toString('utf8'))
    } catch {
      this.fail(`invalid JSON in frame '${h[':event-type'] ?? ''}'`)
      return
    }
    if (!isObject(value)) return
    try {
      this.#event(h[':event-type'] ?? '', value)
    } catch (err) {
      this.fail(`unexpected frame shape: ${(err as Error).message}`)
    }
  }

  #event(name: string, value: Json): void {
    switch (name) {
      case 'contentBlockDelta':
        this.#converseDelta(value.delta)
        return
      case 'metadata':
        this.#converseUsage(value.usage)
        if (isObject(value.metrics)) reportTime(this.summary, ReportedPhase.total, value.metrics.latencyMs, Unit.ms)
        return
      case 'chunk':
        this.#chunk(value)
        return
    }
  }

  #converseDelta(delta: unknown): void {
    if (!isObject(delta)) return
    if (nonEmpty(delta.text)) this.emitText(ContentKind.text, delta.text)
    else if (isObject(delta.toolUse) && nonEmpty(delta.toolUse.input))
      this.emitText(ContentKind.tool, delta.toolUse.input)
    else if (isObject(delta.reasoningContent) && nonEmpty(delta.reasoningContent.text))
      this.emitText(ContentKind.reasoning, delta.reasoningContent.text)
  }

  #converseUsage(usage: unknown): void {
    if (isObject(usage)) converseUsage(usage, this.summary)
  }

  /** InvokeModelWithResponseStream: the model's own chunk, base64 in `bytes`. */
  #chunk(value: Json): void {
    if (!nonEmpty(value.bytes)) return
    let inner: unknown
    try {
      inner = JSON.parse(Buffer.from(value.bytes, 'base64').toString('utf8'))
    } catch {
      this.fail('invalid JSON in a chunk')
      return
    }
    if (!isObject(inner)) return
    const summary = this.summary
    const metrics = inner['amazon-bedrock-invocationMetrics']
    if (isObject(metrics)) {
      setCount(summary, 'output', metrics.outputTokenCount, 'outputTokenCount')
      setCount(summary, 'input', metrics.inputTokenCount, 'inputTokenCount')
      setCount(summary, 'cacheRead', metrics.cacheReadInputTokenCount, 'cacheReadInputTokenCount')
      setCount(summary, 'cacheWrite', metrics.cacheWriteInputTokenCount, 'cacheWriteInputTokenCount')
      reportTime(summary, ReportedPhase.prompt, metrics.firstByteLatency, Unit.ms)
      reportTime(summary, ReportedPhase.total, metrics.invocationLatency, Unit.ms)
    }
    switch (inner.type) {
      case 'message_start': {
        const message = inner.message
        if (isObject(message)) {
          if (summary.model === undefined && nonEmpty(message.model)) summary.model = message.model
          if (isObject(message.usage) && summary.usage?.input === undefined)
            setCount(summary, 'input', message.usage.input_tokens, 'input_tokens')
        }
        return
      }
      case 'content_block_delta': {
        const d = inner.delta
        if (!isObject(d)) return
        if (d.type === 'text_delta' && nonEmpty(d.text)) this.emitText(ContentKind.text, d.text)
        else if (d.type === 'thinking_delta' && nonEmpty(d.thinking)) this.emitText(ContentKind.reasoning, d.thinking)
        else if (d.type === 'input_json_delta' && nonEmpty(d.partial_json))
          this.emitText(ContentKind.tool, d.partial_json)
        return
      }
      case 'message_delta': {
        // Cumulative output; Bedrock's invocation metrics, when they come, say the same or win.
        const u = inner.usage
        if (isObject(u) && !isObject(metrics)) setCount(summary, 'output', u.output_tokens, 'output_tokens')
        return
      }
      case 'error':
        summary.error = isObject(inner.error) && nonEmpty(inner.error.type) ? inner.error.type : 'error'
        return
    }
    // Converse-shaped chunks (Nova via InvokeModel), Llama (`generation`), Titan (`outputText`).
    if (isObject(inner.contentBlockDelta)) this.#converseDelta(inner.contentBlockDelta.delta)
    if (isObject(inner.metadata)) this.#converseUsage(inner.metadata.usage)
    if (nonEmpty(inner.generation)) this.emitText(ContentKind.text, inner.generation)
    if (nonEmpty(inner.outputText)) this.emitText(ContentKind.text, inner.outputText)
  }
}
