import { NdjsonDecoder } from './ndjson-decoder.ts'
import { DecodedParser } from './decoded-parser.ts'
import { ContentKind, usageOf } from './types.ts'
import type { ParserContext, StreamSummary } from './types.ts'
import { isObject, nonEmpty, readCount } from './json.ts'
import { ReportedPhase, Unit, reportTime } from './reported-times.ts'
import type { Json } from './json.ts'

/**
 * Ollama's native API, NDJSON or one JSON answer: https://github.com/ollama/ollama/blob/main/docs/api.md
 * (durations in nanoseconds); its own decode rate goes to the log line, to compare with the proxy's.
 */

/** Usage, model, error and Ollama's decode rate from one line or whole answer. */
function readFinal(value: Json, summary: StreamSummary): void {
  if (summary.model === undefined && nonEmpty(value.model)) summary.model = value.model
  if (value.error !== undefined && value.error !== null) {
    summary.error =
      typeof value.error === 'string'
        ? value.error
        : isObject(value.error) && nonEmpty(value.error.message)
          ? value.error.message
          : 'error'
  }
  if (value.done !== true) return
  reportTime(summary, ReportedPhase.load, value.load_duration, Unit.ns)
  reportTime(summary, ReportedPhase.prompt, value.prompt_eval_duration, Unit.ns)
  reportTime(summary, ReportedPhase.generation, value.eval_duration, Unit.ns)
  reportTime(summary, ReportedPhase.total, value.total_duration, Unit.ns)
  const output = readCount(value.eval_count, summary, 'eval_count')
  if (output !== undefined) usageOf(summary).output = output
  const input = readCount(value.prompt_eval_count, summary, 'prompt_eval_count')
  if (input !== undefined) usageOf(summary).input = input
  // Prompt tokens served from the KV cache (newer Ollama's final object; part of prompt_eval_count).
  const cached =
    value.prompt_eval_cached_count === undefined
      ? undefined
      : readCount(value.prompt_eval_cached_count, summary, 'prompt_eval_cached_count')
  if (cached !== undefined) usageOf(summary).cacheRead = cached
  // Under 1 ns is no duration, and a rate from it would be absurd.
  const duration = value.eval_duration
  if (typeof duration === 'number' && Number.isFinite(duration) && duration >= 1) {
    const extra: Record<string, number | string> = summary.extra ?? {}
    summary.extra = extra
    extra.eval_duration_ms = Math.round(duration / 1e3) / 1e3
    if (output !== undefined) extra.eval_rate_tps = Math.round((output / duration) * 1e9 * 100) / 100
  }
}

/** A whole (`"stream": false`) Ollama answer. */
export function summarizeOllamaBody(value: unknown): StreamSummary {
  const summary: StreamSummary = {}
  if (isObject(value)) readFinal(value, summary)
  return summary
}

/** One Ollama NDJSON response: a content chunk per line with new output, usage from the `done` line. */
export class OllamaParser extends DecodedParser {
  readonly #decoder: NdjsonDecoder
  readonly #onLine = (line: string): void => this.#line(line)
  readonly #onOversize = (bytes: number): void => this.fail(`line of ${bytes} bytes is over the limit`)

  constructor(ctx: ParserContext) {
    super(ctx)
    this.#decoder = new NdjsonDecoder(ctx.maxEventBytes)
  }

  protected decode(chunk: Uint8Array): void {
    this.#decoder.push(chunk, this.#onLine, this.#onOversize)
  }

  protected flush(): void {
    // A last line without its newline has no arrival time left to give: only its usage and error count.
    if (!this.failed) this.#decoder.end(this.#onLine, this.#onOversize)
  }

  #line(line: string): void {
    if (this.failed) return
    let value: unknown
    try {
      value = JSON.parse(line)
    } catch {
      this.fail('invalid JSON line')
      return
    }
    if (!isObject(value)) return
    readFinal(value, this.summary)
    const count = this.ctx.countTokens // the request's tokenizer
    let text = 0
    let reasoning = 0
    let tool = 0
    const message = value.message
    if (isObject(message)) {
      if (nonEmpty(message.content)) text += count(message.content)
      if (nonEmpty(message.thinking)) reasoning += count(message.thinking)
      if (Array.isArray(message.tool_calls)) {
        for (const call of message.tool_calls) {
          if (!isObject(call) || !isObject(call.function)) continue
          const fn = call.function
          tool += Math.max(
            1,
            count(`${typeof fn.name === 'string' ? fn.name : ''}${JSON.stringify(fn.arguments ?? {})}`),
          )
        }
      }
    }
    if (nonEmpty(value.response)) text += count(value.response)
    if (nonEmpty(value.thinking)) reasoning += count(value.thinking)
    if (text + reasoning + tool === 0) return
    const kind = text > 0 ? ContentKind.text : tool > 0 ? ContentKind.tool : ContentKind.reasoning
    this.emit({ kind, tokens: Math.max(1, text + reasoning + tool), exact: false })
  }
}
