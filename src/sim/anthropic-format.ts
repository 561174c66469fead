import type { ServerResponse } from 'node:http'
import type { SimulatorConfig } from '../config/schema.ts'
import type { SimPlan } from './schedule.ts'
import { playStream, plannedText, plannedTokens, promptTokensOf, sendError, sendWhole } from './player.ts'
import type { SimRequest, StreamFormat } from './player.ts'
import { isSuccess } from '../http-status.ts'

/** The simulator's Anthropic Messages API, usage equal to the plan: https://docs.anthropic.com/en/docs/build-with-claude/streaming */

/** `max_tokens` is mandatory in this API, so it is a cap on the configured length, not a wish. */
export function anthropicMaxTokens(body: Record<string, unknown>, cfg: SimulatorConfig): number | undefined {
  return typeof body.max_tokens === 'number' ? Math.min(body.max_tokens, cfg.tokens) : undefined
}

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  529: 'overloaded_error',
}

const event = (name: string, data: unknown): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`

export function serveAnthropic(res: ServerResponse, plan: SimPlan, req: SimRequest): void {
  const body = req.body
  const model = typeof body.model === 'string' && body.model ? body.model : req.defaultModel
  const id = `msg_sim${req.seq}`
  const input = promptTokensOf([body.system, body.messages])
  const output = plannedTokens(plan)
  if (plan.status !== undefined && !isSuccess(plan.status)) {
    const type = ERROR_TYPES[plan.status] ?? 'api_error'
    sendError(res, plan.status, { type: 'error', error: { type, message: `simulated ${plan.status}` } })
    return
  }
  if (body.stream !== true) {
    sendWhole(res, plan, () => ({
      id,
      type: 'message',
      role: 'assistant',
      model,
      content: [{ type: 'text', text: plannedText(plan) }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: output },
    }))
    return
  }
  const format: StreamFormat = {
    contentType: 'text/event-stream; charset=utf-8',
    head: () =>
      event('message_start', {
        type: 'message_start',
        // Like the real API, output_tokens here is a placeholder; message_delta has the count.
        message: {
          id,
          type: 'message',
          role: 'assistant',
          model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 },
        },
      }) +
      event('content_block_start', {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'text', text: '' },
      }) +
      event('ping', { type: 'ping' }),
    content: (_i, text) =>
      event('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } }),
    error: () =>
      event('error', {
        type: 'error',
        error: { type: 'overloaded_error', message: 'simulated error inside the stream' },
      }),
    tail: () =>
      event('content_block_stop', { type: 'content_block_stop', index: 0 }) +
      event('message_delta', {
        type: 'message_delta',
        delta: { stop_reason: 'end_turn', stop_sequence: null },
        usage: { output_tokens: output },
      }) +
      event('message_stop', { type: 'message_stop' }),
  }
  playStream(res, plan, format)
}
