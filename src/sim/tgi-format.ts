import type { ServerResponse } from 'node:http'
import type { SimPlan } from './schedule.ts'
import { playStream, plannedText, plannedTokens, sendError, sendWhole } from './player.ts'
import type { SimRequest, StreamFormat } from './player.ts'
import { isSuccess } from '../http-status.ts'

/**
 * The simulator's TGI native API: https://huggingface.github.io/text-generation-inference/
 * A planned chunk of k tokens is k one-token events written at once.
 */

/** `parameters.max_new_tokens` sizes a seeded plan. */
export function tgiMaxTokens(body: Record<string, unknown>): number | undefined {
  const parameters = body.parameters as { max_new_tokens?: unknown } | null | undefined
  const n = parameters?.max_new_tokens
  return typeof n === 'number' ? n : undefined
}

/** Simulated words all start with a space: split a chunk's text back into its tokens. */
const words = (text: string): string[] => text.split(/(?= )/)

export function serveTgi(res: ServerResponse, plan: SimPlan, req: SimRequest): void {
  if (plan.status !== undefined && !isSuccess(plan.status)) {
    sendError(res, plan.status, { error: `simulated ${plan.status}`, error_type: 'validation' })
    return
  }
  const details = { finish_reason: 'length', generated_tokens: plannedTokens(plan), seed: null }
  if (!req.url.split('?')[0].endsWith('/generate_stream')) {
    sendWhole(res, plan, () => ({ generated_text: plannedText(plan), details }))
    return
  }
  let index = 0
  let generated = ''
  const format: StreamFormat = {
    contentType: 'text/event-stream',
    head: () => '',
    content: (_i, text, last) => {
      let out = ''
      const tokens = words(text)
      tokens.forEach((word, j) => {
        index++
        generated += word
        const end = last && j === tokens.length - 1
        out += `data:${JSON.stringify({ index, token: { id: 1000 + index, text: word, logprob: -0.1, special: false }, generated_text: end ? generated : null, details: end ? details : null })}\n\n`
      })
      return out
    },
    error: () => `data:${JSON.stringify({ error: 'simulated error inside the stream', error_type: 'generation' })}\n\n`,
    tail: () => '',
  }
  playStream(res, plan, format)
}
