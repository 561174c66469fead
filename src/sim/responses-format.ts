import type { ServerResponse } from 'node:http'
import type { SimPlan } from './schedule.ts'
import { playStream, plannedText, plannedTokens, promptTokensOf, sendError, sendWhole } from './player.ts'
import type { SimRequest, StreamFormat } from './player.ts'
import { isSuccess } from '../http-status.ts'

/** The simulator's OpenAI Responses API, usage equal to the plan: https://platform.openai.com/docs/api-reference/responses-streaming */

/** `max_output_tokens`, like `max_tokens` for chat in the simulator: the answer's length. */
export function responsesMaxTokens(body: Record<string, unknown>): number | undefined {
  return typeof body.max_output_tokens === 'number' ? body.max_output_tokens : undefined
}

export function serveResponses(res: ServerResponse, plan: SimPlan, req: SimRequest): void {
  const body = req.body
  if (plan.status !== undefined && !isSuccess(plan.status)) {
    sendError(res, plan.status, {
      error: {
        message: `simulated ${plan.status}`,
        type: plan.status >= 500 ? 'server_error' : 'invalid_request_error',
        param: null,
        code: `sim_${plan.status}`,
      },
    })
    return
  }
  const model = typeof body.model === 'string' && body.model ? body.model : req.defaultModel
  const id = `resp_sim${req.seq}`
  const itemId = `msg_sim${req.seq}`
  const createdAt = Math.floor(Date.now() / 1000)
  const input = promptTokensOf([body.instructions, body.input])
  const output = plannedTokens(plan)
  const usage = {
    input_tokens: input,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  }
  const message = (status: string, text: string) => ({
    id: itemId,
    type: 'message',
    status,
    role: 'assistant',
    content: status === 'in_progress' ? [] : [{ type: 'output_text', text, annotations: [], logprobs: [] }],
  })
  const response = (status: string, extra: Record<string, unknown>) => ({
    id,
    object: 'response',
    created_at: createdAt,
    status,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model,
    output: [],
    parallel_tool_calls: true,
    previous_response_id: null,
    store: false,
    temperature: 1,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: 1,
    truncation: 'disabled',
    usage: null,
    metadata: {},
    ...extra,
  })

  if (body.stream !== true) {
    sendWhole(res, plan, () => response('completed', { output: [message('completed', plannedText(plan))], usage }))
    return
  }
  let seq = 0
  let text = ''
  const event = (type: string, data: Record<string, unknown>): string =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`
  const part = (t: string) => ({ type: 'output_text', text: t, annotations: [], logprobs: [] })
  const format: StreamFormat = {
    contentType: 'text/event-stream; charset=utf-8',
    head: () =>
      event('response.created', { response: response('in_progress', {}) }) +
      event('response.in_progress', { response: response('in_progress', {}) }) +
      event('response.output_item.added', { output_index: 0, item: message('in_progress', '') }) +
      event('response.content_part.added', { item_id: itemId, output_index: 0, content_index: 0, part: part('') }),
    content: (_i, delta) => {
      text += delta
      return event('response.output_text.delta', {
        item_id: itemId,
        output_index: 0,
        content_index: 0,
        delta,
        logprobs: [],
      })
    },
    error: () =>
      event('error', { code: 'server_error', message: 'simulated error inside the stream', param: null }) +
      event('response.failed', {
        response: response('failed', { error: { code: 'server_error', message: 'simulated error inside the stream' } }),
      }),
    tail: () =>
      event('response.output_text.done', { item_id: itemId, output_index: 0, content_index: 0, text, logprobs: [] }) +
      event('response.content_part.done', { item_id: itemId, output_index: 0, content_index: 0, part: part(text) }) +
      event('response.output_item.done', { output_index: 0, item: message('completed', text) }) +
      event('response.completed', { response: response('completed', { output: [message('completed', text)], usage }) }),
  }
  playStream(res, plan, format)
}
