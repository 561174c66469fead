import { isObject, readCount } from './json.ts'
import type { Json } from './json.ts'
import { ReportedPhase, Unit, reportTime } from './reported-times.ts'
import type { StreamSummary, Usage } from './types.ts'

// What an OpenAI-style answer reports about itself, read the same way from a stream's chunks
// (openai-chat.ts, openai-responses.ts) and a whole JSON answer (openai-body.ts).

/** A Chat Completions `usage` object into `u`; a field that is not a count is left as it was. */
export function readChatUsage(usage: Json, u: Usage, summary: StreamSummary): void {
  const output = readCount(usage.completion_tokens, summary, 'completion_tokens')
  if (output !== undefined) u.output = output
  const input = readCount(usage.prompt_tokens, summary, 'prompt_tokens')
  if (input !== undefined) u.input = input
  readOpenAIDetails(usage, u, summary)
  readGroqTimes(usage, summary)
}

/**
 * Reasoning and cache-read breakdowns of an OpenAI-style `usage`, as reported (parts of output and input):
 * https://platform.openai.com/docs/api-reference/chat/object, https://api-docs.deepseek.com/guides/kv_cache
 */
export function readOpenAIDetails(usage: Json, u: Usage, summary: StreamSummary): void {
  const out = isObject(usage.completion_tokens_details) ? usage.completion_tokens_details : usage.output_tokens_details
  const reasoning = isObject(out) ? readCount(out.reasoning_tokens, summary, 'reasoning_tokens') : undefined
  if (reasoning !== undefined) u.reasoning = reasoning
  const prompt = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : usage.input_tokens_details
  const cached =
    isObject(prompt) && prompt.cached_tokens !== undefined
      ? readCount(prompt.cached_tokens, summary, 'cached_tokens')
      : readCount(usage.prompt_cache_hit_tokens, summary, 'prompt_cache_hit_tokens')
  if (cached !== undefined) u.cacheRead = cached
  // vLLM: prompt tokens written to its prefix cache by this request (PromptTokenUsageInfo.created_cache_tokens).
  const created =
    isObject(prompt) && prompt.created_cache_tokens !== undefined && prompt.created_cache_tokens !== null
      ? readCount(prompt.created_cache_tokens, summary, 'created_cache_tokens')
      : undefined
  if (created !== undefined) u.cacheWrite = created
}

/**
 * vLLM's per-request `metrics` (docs/features/per_request_metrics.md): its `time_to_first_token_ms`
 * runs from scheduling, queue excluded, so it is the prompt phase, not TTFT.
 */
export function readVllmMetrics(metrics: Json, summary: StreamSummary): void {
  reportTime(summary, ReportedPhase.queue, metrics.queue_time_ms, Unit.ms)
  reportTime(summary, ReportedPhase.prompt, metrics.time_to_first_token_ms, Unit.ms)
  reportTime(summary, ReportedPhase.generation, metrics.generation_time_ms, Unit.ms)
  const spec = metrics.speculative_decoding
  if (!isObject(spec)) return
  const drafted = readCount(spec.num_draft_tokens, summary, 'num_draft_tokens')
  const accepted = readCount(spec.num_accepted_draft_tokens, summary, 'num_accepted_draft_tokens')
  if (drafted !== undefined && accepted !== undefined && accepted <= drafted)
    summary.speculative = { drafted, accepted }
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
