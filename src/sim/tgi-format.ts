import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { SimulatorConfig } from '../config/schema.ts'
import { planFor } from './schedule.ts'
import type { SimPlanRequest } from './schedule.ts'
import { answerLater, planText, planTokens, playPlan, requestedPlan } from './play-plan.ts'

/**
 * The simulated model speaking Hugging Face TGI's native API: `POST /generate_stream` (SSE,
 * `data:{…}` without a space, one event per token) and `POST /generate` (one JSON answer).
 * A planned chunk of k tokens is k token events written at once; the last event carries
 * `generated_text` and `details.generated_tokens` = the planned tokens.
 * https://huggingface.github.io/text-generation-inference/
 */

interface Body {
  inputs?: unknown
  parameters?: { max_new_tokens?: unknown } | null
  tokentap_sim?: SimPlanRequest
}

/** Simulated words all start with a space: split a chunk's text back into its tokens. */
const words = (text: string): string[] => text.split(/(?= )/)

/** Adds `POST /generate_stream` and `POST /generate` to the simulator. */
export function registerTgi(app: FastifyInstance, cfg: SimulatorConfig): void {
  let seq = 0
  const handle = (stream: boolean) => async (request: FastifyRequest, reply: FastifyReply) => {
    const body = (typeof request.body === 'object' && request.body !== null ? request.body : {}) as Body
    const maxNew = body.parameters?.max_new_tokens
    const plan = planFor(cfg, typeof maxNew === 'number' ? maxNew : undefined, requestedPlan(request.headers['x-tokentap-sim'], body.tokentap_sim), seq++)
    reply.hijack()
    const res = reply.raw
    if (plan.status !== undefined && (plan.status < 200 || plan.status >= 300)) {
      const text = JSON.stringify({ error: `simulated ${plan.status}`, error_type: 'validation' })
      res.writeHead(plan.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
      res.end(text)
      return
    }
    const total = planTokens(plan)
    const details = { finish_reason: 'length', generated_tokens: total, seed: null }
    if (!stream) {
      answerLater(res, plan, 'application/json', () => JSON.stringify({ generated_text: planText(plan), details }))
      return
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    res.flushHeaders()
    let index = 0
    let generated = ''
    playPlan(res, plan, {
      chunk: (_i, text) => {
        let out = ''
        for (const word of words(text)) {
          index++
          generated += word
          const last = index === total
          out += `data:${JSON.stringify({ index, token: { id: 1000 + index, text: word, logprob: -0.1, special: false }, generated_text: last ? generated : null, details: last ? details : null })}\n\n`
        }
        return out
      },
      end: () => '',
      error: () => `data:${JSON.stringify({ error: 'simulated error inside the stream', error_type: 'generation' })}\n\n`,
    })
  }
  app.post('/generate_stream', handle(true))
  app.post('/generate', handle(false))
}
