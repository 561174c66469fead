import { performance } from 'node:perf_hooks'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { SimulatorConfig } from '../config/schema.ts'
import { planFor } from './schedule.ts'
import type { SimPlanRequest } from './schedule.ts'
import { answerLater, planText, planTokens, playPlan, requestedPlan } from './play-plan.ts'

/**
 * The simulated model speaking Ollama's native API: `POST /api/chat` and `POST /api/generate`,
 * NDJSON lines (streaming is Ollama's default) or one JSON answer with `"stream": false`.
 * The `done` line's `eval_count` is the planned token count; durations are in nanoseconds.
 * https://github.com/ollama/ollama/blob/main/docs/api.md
 */

type Api = 'chat' | 'generate'

interface Body {
  model?: unknown
  stream?: unknown
  messages?: unknown
  prompt?: unknown
  options?: { num_predict?: unknown } | null
  tokentap_sim?: SimPlanRequest
}

const ns = (ms: number): number => Math.round(ms * 1e6)

/** Adds `POST /api/chat` and `POST /api/generate` to the simulator. */
export function registerOllama(app: FastifyInstance, cfg: SimulatorConfig): void {
  let seq = 0
  const handle = (api: Api) => async (request: FastifyRequest, reply: FastifyReply) => {
    const body = (typeof request.body === 'object' && request.body !== null ? request.body : {}) as Body
    const model = typeof body.model === 'string' && body.model ? body.model : cfg.model
    const numPredict = body.options?.num_predict
    const plan = planFor(cfg, typeof numPredict === 'number' && numPredict > 0 ? numPredict : undefined, requestedPlan(request.headers['x-tokentap-sim'], body.tokentap_sim), seq++)
    reply.hijack()
    const res = reply.raw
    if (plan.status !== undefined && (plan.status < 200 || plan.status >= 300)) {
      const text = JSON.stringify({ error: `simulated ${plan.status}` })
      res.writeHead(plan.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) })
      res.end(text)
      return
    }
    const promptTokens = Math.max(1, Math.ceil(JSON.stringify(body.messages ?? body.prompt ?? '').length / 4))
    const evalCount = planTokens(plan)
    const start = performance.now()
    let firstAt: number | undefined
    const createdAt = (): string => new Date().toISOString()
    const content = (text: string): Record<string, unknown> => (api === 'chat' ? { message: { role: 'assistant', content: text } } : { response: text })
    const final = (text: string): string => {
      const now = performance.now()
      const evalMs = firstAt === undefined ? 0 : now - firstAt
      return JSON.stringify({
        model,
        created_at: createdAt(),
        ...content(text),
        done_reason: 'stop',
        done: true,
        ...(api === 'generate' ? { context: [] } : {}),
        total_duration: ns(now - start),
        load_duration: 0,
        prompt_eval_count: promptTokens,
        prompt_eval_duration: ns((firstAt ?? now) - start),
        eval_count: evalCount,
        eval_duration: ns(evalMs),
      })
    }
    if (body.stream === false) {
      answerLater(res, plan, 'application/json; charset=utf-8', () => {
        firstAt = start
        return final(planText(plan))
      })
      return
    }
    res.writeHead(200, { 'content-type': 'application/x-ndjson' })
    res.flushHeaders()
    playPlan(res, plan, {
      chunk: (_i, text) => {
        firstAt ??= performance.now()
        return JSON.stringify({ model, created_at: createdAt(), ...content(text), done: false }) + '\n'
      },
      end: () => final('') + '\n',
      error: () => JSON.stringify({ error: 'simulated error inside the stream' }) + '\n',
    })
  }
  app.post('/api/chat', handle('chat'))
  app.post('/api/generate', handle('generate'))
}
