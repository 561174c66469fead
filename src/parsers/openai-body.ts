import { isObject } from './json.ts'
import { readChatUsage, readLlamaCppTimes, readVllmMetrics } from './openai-usage.ts'
import type { StreamSummary, Usage } from './types.ts'

/** Usage and model of a whole OpenAI-style JSON answer (chat, completions, errors). */
export function summarizeOpenAIBody(value: unknown): StreamSummary {
  if (typeof value !== 'object' || value === null) return {}
  const v = value as Record<string, unknown>
  const summary: StreamSummary = {}
  if (typeof v.model === 'string' && v.model) summary.model = v.model
  const u = v.usage
  if (isObject(u)) {
    const usage: Usage = {}
    readChatUsage(u, usage, summary)
    summary.usage = usage
  }
  if (typeof v.timings === 'object' && v.timings !== null && !Array.isArray(v.timings))
    readLlamaCppTimes(v.timings as Record<string, unknown>, summary)
  if (isObject(v.metrics)) readVllmMetrics(v.metrics, summary)
  return summary
}
