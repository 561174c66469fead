import { monotonicNow } from '../clock.ts'
import type { ServerResponse } from 'node:http'
import type { SimPlan } from './schedule.ts'
import { playStream, plannedText, plannedTokens, promptTokensOf, sendError, sendWhole } from './player.ts'
import type { SimRequest, StreamFormat } from './player.ts'
import { isSuccess } from '../http-status.ts'

/** The simulator's Ollama native API, durations in ns: https://github.com/ollama/ollama/blob/main/docs/api.md */

/** `options.num_predict` sizes a seeded plan. */
export function ollamaMaxTokens(body: Record<string, unknown>): number | undefined {
  const options = body.options as { num_predict?: unknown } | null | undefined
  const n = options?.num_predict
  return typeof n === 'number' && n > 0 ? n : undefined
}

const ns = (ms: number): number => Math.round(ms * 1e6)

export function serveOllama(res: ServerResponse, plan: SimPlan, req: SimRequest): void {
  const body = req.body
  if (plan.status !== undefined && !isSuccess(plan.status)) {
    sendError(res, plan.status, { error: `simulated ${plan.status}` })
    return
  }
  const chat = req.url.split('?')[0].endsWith('/api/chat')
  const model = typeof body.model === 'string' && body.model ? body.model : req.defaultModel
  const promptTokens = promptTokensOf(body.messages ?? body.prompt)
  const start = monotonicNow()
  let firstAt: number | undefined
  const content = (text: string): Record<string, unknown> =>
    chat ? { message: { role: 'assistant', content: text } } : { response: text }
  const final = (text: string): Record<string, unknown> => {
    const now = monotonicNow()
    return {
      model,
      created_at: new Date().toISOString(),
      ...content(text),
      done_reason: 'stop',
      done: true,
      ...(chat ? {} : { context: [] }),
      total_duration: ns(now - start),
      load_duration: 0,
      prompt_eval_count: promptTokens,
      prompt_eval_duration: ns((firstAt ?? now) - start),
      eval_count: plannedTokens(plan),
      eval_duration: ns(firstAt === undefined ? 0 : now - firstAt),
    }
  }
  if (body.stream === false) {
    sendWhole(res, plan, () => {
      firstAt = start
      return final(plannedText(plan))
    })
    return
  }
  const format: StreamFormat = {
    contentType: 'application/x-ndjson',
    head: () => '',
    content: (_index, text) => {
      firstAt ??= monotonicNow()
      return `${JSON.stringify({ model, created_at: new Date().toISOString(), ...content(text), done: false })}\n`
    },
    error: () => `${JSON.stringify({ error: 'simulated error inside the stream' })}\n`,
    tail: () => `${JSON.stringify(final(''))}\n`,
  }
  playStream(res, plan, format)
}
