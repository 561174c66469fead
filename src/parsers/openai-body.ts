import type { StreamSummary, Usage } from './types.ts'
import { readGroqTimes, readLlamaCppTimes } from './openai-chat.ts'

/** Usage and model of a whole OpenAI-style JSON answer (chat, completions, errors). */
export function summarizeOpenAIBody(value: unknown): StreamSummary {
  if (typeof value !== 'object' || value === null) return {}
  const v = value as Record<string, unknown>
  const summary: StreamSummary = {}
  if (typeof v.model === 'string' && v.model) summary.model = v.model
  const u = v.usage as Record<string, unknown> | undefined
  if (typeof u === 'object' && u !== null) {
    const usage: Usage = {}
    if (typeof u.completion_tokens === 'number') usage.output = u.completion_tokens
    if (typeof u.prompt_tokens === 'number') usage.input = u.prompt_tokens
    const d = u.completion_tokens_details as Record<string, unknown> | undefined
    if (typeof d === 'object' && d !== null && typeof d.reasoning_tokens === 'number') usage.reasoning = d.reasoning_tokens
    summary.usage = usage
    readGroqTimes(u, summary)
  }
  if (typeof v.timings === 'object' && v.timings !== null && !Array.isArray(v.timings)) readLlamaCppTimes(v.timings as Record<string, unknown>, summary)
  return summary
}
