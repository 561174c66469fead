import { SseJsonParser } from './sse-json-parser.ts'
import { ContentKind, usageOf } from './types.ts'
import type { ContentEvent, StreamSummary } from './types.ts'
import { isObject, readCount } from './json.ts'
import type { Json } from './json.ts'
import { ReportedPhase, reportedSeconds, Unit } from './reported-times.ts'
import type { ReportedTimes } from './reported-times.ts'

/**
 * Hugging Face TGI's native API: https://huggingface.github.io/text-generation-inference/
 * Every stream event is one generated token, so each non-special token is an exact 1-token chunk.
 */

/** A header's whole or decimal number of milliseconds, in seconds, when it is a sane duration. */
function headerMs(value: string | undefined): number | undefined {
  return value !== undefined && /^\d{1,12}(?:\.\d{1,9})?$/.test(value)
    ? reportedSeconds(Number(value), Unit.ms)
    : undefined
}

/**
 * TGI's `x-queue-time` and `x-total-time` headers (router/src/server.rs, `generate_internal`); `x-inference-time`
 * is no single phase, and a stream's head leaves before the timings exist.
 */
export function tgiHeaderTimes(header: (lowerName: string) => string | undefined): ReportedTimes | undefined {
  const queue = headerMs(header('x-queue-time'))
  const total = headerMs(header('x-total-time'))
  if (queue === undefined && total === undefined) return undefined
  const times: ReportedTimes = {}
  if (queue !== undefined) times[ReportedPhase.queue] = queue
  if (total !== undefined) times[ReportedPhase.total] = total
  return times
}

const ONE_TOKEN: ContentEvent = Object.freeze({ kind: ContentKind.text, tokens: 1, exact: true })

function readDetails(value: Json, summary: StreamSummary): void {
  const details = value.details
  const output = isObject(details) ? readCount(details.generated_tokens, summary, 'generated_tokens') : undefined
  if (output !== undefined) usageOf(summary).output = output
  if (value.error !== undefined && value.error !== null) summary.error = String(value.error_type ?? value.error)
}

/** A whole `/generate` answer (an object, or the one-element array the HF Inference API returns). */
export function summarizeTgiBody(value: unknown): StreamSummary {
  const summary: StreamSummary = {}
  const answer = Array.isArray(value) ? value[0] : value
  if (isObject(answer)) readDetails(answer, summary)
  return summary
}

/** One TGI `/generate_stream` response: an exact one-token content chunk per non-special token event. */
export class TgiParser extends SseJsonParser {
  protected onJson(_event: string, value: unknown): void {
    if (!isObject(value)) return
    readDetails(value, this.summary)
    const token = value.token
    if (isObject(token) && token.special !== true && token.id !== undefined) this.emit(ONE_TOKEN)
  }
}
