import { isCount, isObject } from './json.ts'
import type { Json } from './json.ts'
import type { StreamSummary, Usage } from './types.ts'

/**
 * The token breakdowns of an OpenAI-style `usage` object, as reported (never estimated):
 * reasoning from `completion_tokens_details.reasoning_tokens` (Responses:
 * `output_tokens_details`), cache reads from `prompt_tokens_details.cached_tokens` (Responses:
 * `input_tokens_details`), else DeepSeek's `prompt_cache_hit_tokens`. Both are parts of the
 * output and input counts. https://platform.openai.com/docs/api-reference/chat/object
 * https://api-docs.deepseek.com/guides/kv_cache
 */
export function readOpenAIDetails(usage: Json, u: Usage): void {
  const out = isObject(usage.completion_tokens_details) ? usage.completion_tokens_details : usage.output_tokens_details
  if (isObject(out) && isCount(out.reasoning_tokens)) u.reasoning = out.reasoning_tokens
  const prompt = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : usage.input_tokens_details
  if (isObject(prompt) && isCount(prompt.cached_tokens)) u.cacheRead = prompt.cached_tokens
  else if (isCount(usage.prompt_cache_hit_tokens)) u.cacheRead = usage.prompt_cache_hit_tokens
}

/** Usage and model of a whole OpenAI-style JSON answer (chat, completions, errors). */
export function summarizeOpenAIBody(value: unknown): StreamSummary {
  if (typeof value !== 'object' || value === null) return {}
  const v = value as Record<string, unknown>
  const summary: StreamSummary = {}
  if (typeof v.model === 'string' && v.model) summary.model = v.model
  const u = v.usage
  if (isObject(u)) {
    const usage: Usage = {}
    if (typeof u.completion_tokens === 'number') usage.output = u.completion_tokens
    if (typeof u.prompt_tokens === 'number') usage.input = u.prompt_tokens
    readOpenAIDetails(u, usage)
    summary.usage = usage
  }
  return summary
}
