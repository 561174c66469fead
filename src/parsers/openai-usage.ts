import { isObject, readCount } from './json.ts'
import type { Json } from './json.ts'
import { ReportedPhase, Unit, reportTime } from './reported-times.ts'
import type { StreamSummary, Usage } from './types.ts'

// What an OpenAI-style answer reports about itself, read the same way from a stream's chunks
// (openai-chat.ts, openai-responses.ts) and a whole JSON answer (openai-body.ts).

/**
 * A Chat Completions `usage` object into `u`: `completion_tokens` → output, `prompt_tokens` →
 * input, the breakdowns (readOpenAIDetails) and Groq's timings in it. A count that is not one
 * leaves its field as it was.
 */
export function readChatUsage(usage: Json, u: Usage, summary: StreamSummary): void {
  const output = readCount(usage.completion_tokens, summary, 'completion_tokens')
  if (output !== undefined) u.output = output
  const input = readCount(usage.prompt_tokens, summary, 'prompt_tokens')
  if (input !== undefined) u.input = input
  readOpenAIDetails(usage, u, summary)
  readGroqTimes(usage, summary)
}

/**
 * The token breakdowns of an OpenAI-style `usage` object, as reported (never estimated):
 * reasoning from `completion_tokens_details.reasoning_tokens` (Responses:
 * `output_tokens_details`), cache reads from `prompt_tokens_details.cached_tokens` (Responses:
 * `input_tokens_details`), else DeepSeek's `prompt_cache_hit_tokens`. Both are parts of the
 * output and input counts. https://platform.openai.com/docs/api-reference/chat/object
 * https://api-docs.deepseek.com/guides/kv_cache
 */
export function readOpenAIDetails(usage: Json, u: Usage, summary: StreamSummary): void {
  const out = isObject(usage.completion_tokens_details) ? usage.completion_tokens_details : usage.output_tokens_details
  const reasoning = isObject(out) ? readCount(out.reasoning_tokens, summary, 'reasoning_tokens') : undefined
  if (reasoning !== undefined) u.reasoning = reasoning
  const prompt = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : usage.input_tokens_details
  const cached =
    isObject(prompt) && prompt.cached_tokens !== undefined ? readCount(prompt.cached_tokens, summary, 'cached_tokens') : readCount(usage.prompt_cache_hit_tokens, summary, 'prompt_cache_hit_tokens')
  if (cached !== undefined) u.cacheRead = cached
  // vLLM: prompt tokens written to its prefix cache by this request (PromptTokenUsageInfo.created_cache_tokens).
  const created =
    isObject(prompt) && prompt.created_cache_tokens !== undefined && prompt.created_cache_tokens !== null ? readCount(prompt.created_cache_tokens, summary, 'created_cache_tokens') : undefined
  if (created !== undefined) u.cacheWrite = created
}

/**
 * vLLM's per-request `metrics` object (`--enable-per-request-metrics`; docs/features/per_request_metrics.md,
 * on the final usage chunk of a stream, top-level in a whole answer): by vLLM's definitions,
 * `queue_time_ms` → queue, `time_to_first_token_ms` (from the request's scheduling to its first
 * token: the prefill, queue excluded) → prompt, `generation_time_ms` (first to last output token)
 * → generation. `speculative_decoding` (`--per-request-spec-decode-metrics`, experimental):
 * `num_draft_tokens` proposed, `num_accepted_draft_tokens` accepted. A null field is not reported.
 */
export function readVllmMetrics(metrics: Json, summary: StreamSummary): void {
  reportTime(summary, ReportedPhase.queue, metrics.queue_time_ms, Unit.ms)
  reportTime(summary, ReportedPhase.prompt, metrics.time_to_first_token_ms, Unit.ms)
  reportTime(summary, ReportedPhase.generation, metrics.generation_time_ms, Unit.ms)
  const spec = metrics.speculative_decoding
  if (!isObject(spec)) return
  const drafted = readCount(spec.num_draft_tokens, summary, 'num_draft_tokens')
  const accepted = readCount(spec.num_accepted_draft_tokens, summary, 'num_accepted_draft_tokens')
  if (drafted !== undefined && accepted !== undefined && accepted <= drafted) summary.speculative = { drafted, accepted }
}

/** Groq's timings in a usage object (`x_groq.usage` in a stream, `usage` in a whole answer), seconds. */
function readGroqTimes(usage: Json, summary: StreamSummary): void {
  reportTime(summary, ReportedPhase.queue, usage.queue_time, Unit.s)
  reportTime(summary, ReportedPhase.prompt, usage.prompt_time, Unit.s)
  reportTime(summary, ReportedPhase.generation, usage.completion_time, Unit.s)
  reportTime(summary, ReportedPhase.total, usage.total_time, Unit.s)
}

/** llama.cpp server's `timings` (milliseconds): the last one sent wins (it runs on with `timings_per_token`). */
export function readLlamaCppTimes(timings: Json, summary: StreamSummary): void {
  reportTime(summary, ReportedPhase.prompt, timings.prompt_ms, Unit.ms)
  reportTime(summary, ReportedPhase.generation, timings.predicted_ms, Unit.ms)
}
