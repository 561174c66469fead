import type { ServerResponse } from 'node:http'
import type { SimPlan } from './schedule.ts'
import { playStream, plannedText, plannedTokens, promptTokensOf, sendError, sendWhole } from './player.ts'
import type { SimRequest, StreamFormat } from './player.ts'
import { isSuccess } from '../http-status.ts'

/**
 * The simulator's Cohere Chat API v2, usage equal to the plan: https://docs.cohere.com/v2/docs/streaming
 * Each event is named twice (SSE event and JSON `type`), as Cohere writes it.
 */

/** `max_tokens` sizes a seeded plan. */
export function cohereMaxTokens(body: Record<string, unknown>): number | undefined {
  return typeof body.max_tokens === 'number' ? body.max_tokens : undefined
}

const event = (data: { readonly type: string; readonly [key: string]: unknown }): string =>
  `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`

export function serveCohere(res: ServerResponse, plan: SimPlan, req: SimRequest): void {
  const body = req.body
  const id = `00000000-0000-4000-8000-${String(req.seq).padStart(12, '0')}`
  const input = promptTokensOf(body.messages)
  const output = plannedTokens(plan)
  const usage = {
    billed_units: { input_tokens: input, output_tokens: output },
    tokens: { input_tokens: input, output_tokens: output },
  }
  if (plan.status !== undefined && !isSuccess(plan.status)) {
    sendError(res, plan.status, { id, message: `simulated ${plan.status}` })
    return
  }
  if (body.stream !== true) {
    sendWhole(res, plan, () => ({
      id,
      finish_reason: 'COMPLETE',
      message: { role: 'assistant', content: [{ type: 'text', text: plannedText(plan) }] },
      usage,
    }))
    return
  }
  const format: StreamFormat = {
    contentType: 'text/event-stream',
    head: () =>
      event({
        id,
        type: 'message-start',
        delta: { message: { role: 'assistant', content: [], tool_plan: '', tool_calls: [], citations: [] } },
      }) + event({ type: 'content-start', index: 0, delta: { message: { content: { type: 'text', text: '' } } } }),
    content: (_i, text) => event({ type: 'content-delta', index: 0, delta: { message: { content: { text } } } }),
    error: () =>
      event({ type: 'message-end', delta: { error: 'simulated error inside the stream', finish_reason: 'ERROR' } }),
    tail: () =>
      event({ type: 'content-end', index: 0 }) +
      event({ type: 'message-end', delta: { finish_reason: 'COMPLETE', usage } }),
  }
  playStream(res, plan, format)
}
