import { readCount } from './json.ts'
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
    const output = readCount(u.completion_tokens, summary, 'completion_tokens')
    if (output !== undefined) usage.output = output
    const input = readCount(u.prompt_tokens, summary, 'prompt_tokens')
    if (input !== undefined) usage.input = input
    const d = u.completion_tokens_details as Record<string, unknown> | undefined
    const reasoning = typeof d === 'object' && d !== null ? readCount(d.reasoning_tokens, summary, 'reasoning_tokens') : undefined
    if (reasoning !== undefined) usage.reasoning = reasoning
    summary.usage = usage
    readGroqTimes(u, summary)
  }
  if (typeof v.timings === 'object' && v.timings !== null && !Array.isArray(v.timings)) readLlamaCppTimes(v.timings as Record<string, unknown>, summary)
  return summary
}
