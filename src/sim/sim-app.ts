import { monotonicNow } from '../clock.ts'
import { performance } from 'node:perf_hooks'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { SimulatorConfig } from '../config/schema.ts'
import { ollamaMaxTokens, serveOllama } from './ollama-format.ts'
import { planFor } from './schedule.ts'
import type { SimPlan, SimPlanRequest } from './schedule.ts'
import { anthropicMaxTokens, serveAnthropic } from './anthropic-format.ts'
import { cohereMaxTokens, serveCohere } from './cohere-format.ts'
import { geminiMaxTokens, serveGemini } from './gemini-format.ts'
import { responsesMaxTokens, serveResponses } from './responses-format.ts'
import { tgiMaxTokens, serveTgi } from './tgi-format.ts'
import { serveGeminiLive } from './realtime-gemini.ts'
import { serveOpenAIRealtime } from './realtime-openai.ts'
import { playStream, plannedText, plannedTokens, promptTokensOf, sendWhole } from './player.ts'
import type { SimRequest, StreamFormat } from './player.ts'
import { isSuccess } from '../http-status.ts'

/**
 * The built-in simulated model (OpenAI-compatible here, other APIs in *-format.ts and realtime-*.ts) on a
 * seeded schedule; a request may ask for an exact plan (`tokentap_sim` body field or `x-tokentap-sim` header).
 * Each streamed event carries `tokentap_sent_ms`, its monotonic send time, so a benchmark can measure one-way delay.
 */

type Api = 'chat' | 'completions'

interface Body {
  model?: unknown
  stream?: unknown
  max_tokens?: unknown
  max_completion_tokens?: unknown
  stream_options?: { include_usage?: unknown } | null
  tokentap_sim?: SimPlanRequest
  messages?: unknown
  prompt?: unknown
}

function wallMs(): number {
  return performance.timeOrigin + monotonicNow()
}

function planFromRequest(header: string | string[] | undefined, body: Body): SimPlanRequest | undefined {
  if (typeof body.tokentap_sim === 'object' && body.tokentap_sim !== null) return body.tokentap_sim
  if (typeof header === 'string') {
    try {
      return JSON.parse(header) as SimPlanRequest
    } catch {
      return undefined
    }
  }
  return undefined
}

function errorBody(status: number, message: string): string {
  return JSON.stringify({
    error: {
      message,
      type: status >= 500 ? 'server_error' : 'invalid_request_error',
      param: null,
      code: `sim_${status}`,
    },
  })
}

/**
 * Bytes a response's socket buffers before the player waits for 'drain'. Not Node's 16 KiB: a fast provider
 * fills whole 64 KiB reads, and small writes would make a proxy in front read (and hold) small pieces instead.
 */
const SOCKET_HIGH_WATER_MARK = 256 * 1024

export function buildSimulator(cfg: SimulatorConfig): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 64 * 1024 * 1024, http: { highWaterMark: SOCKET_HIGH_WATER_MARK } })
  let seq = 0

  const handle =
    (api: Api) =>
    async (
      request: { body: unknown; headers: Record<string, string | string[] | undefined> },
      reply: { hijack(): void; raw: ServerResponse },
    ) => {
      const body = (typeof request.body === 'object' && request.body !== null ? request.body : {}) as Body
      const model = typeof body.model === 'string' && body.model ? body.model : cfg.model
      const maxTokens =
        typeof body.max_completion_tokens === 'number'
          ? body.max_completion_tokens
          : typeof body.max_tokens === 'number'
            ? body.max_tokens
            : undefined
      const plan = planFor(cfg, maxTokens, planFromRequest(request.headers['x-tokentap-sim'], body), seq++)
      reply.hijack()
      const res = reply.raw
      const id = `${api === 'chat' ? 'chatcmpl' : 'cmpl'}-sim${seq}`
      const created = Math.floor(Date.now() / 1000)
      const usage = {
        prompt_tokens: promptTokensOf(body.messages ?? body.prompt),
        completion_tokens: plannedTokens(plan),
      }
      const fullUsage = { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens }
      if (plan.status !== undefined && !isSuccess(plan.status)) {
        const text = errorBody(plan.status, `simulated ${plan.status}`)
        res.writeHead(plan.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
        res.end(text)
        return
      }
      if (body.stream === true)
        streamAnswer(res, api, plan, {
          id,
          created,
          model,
          usage: fullUsage,
          includeUsage: body.stream_options?.include_usage === true,
        })
      else wholeAnswer(res, api, plan, { id, created, model, usage: fullUsage })
    }

  app.post('/v1/chat/completions', handle('chat'))
  app.post('/v1/completions', handle('completions'))

  type Serve = (res: ServerResponse, plan: SimPlan, req: SimRequest) => void
  const format =
    (maxTokens: (body: Record<string, unknown>) => number | undefined, serve: Serve) =>
    async (
      request: { body: unknown; url: string; headers: Record<string, string | string[] | undefined> },
      reply: { hijack(): void; raw: ServerResponse },
    ) => {
      const body = (
        typeof request.body === 'object' && request.body !== null && !Array.isArray(request.body) ? request.body : {}
      ) as Record<string, unknown>
      const plan = planFor(
        cfg,
        maxTokens(body),
        planFromRequest(request.headers['x-tokentap-sim'], body as Body),
        seq++,
      )
      reply.hijack()
      serve(reply.raw, plan, { body, url: request.url, defaultModel: cfg.model, seq })
    }
  app.post(
    '/v1/messages',
    format((body) => anthropicMaxTokens(body, cfg), serveAnthropic),
  )
  app.post('/v1/responses', format(responsesMaxTokens, serveResponses))
  for (const prefix of ['/v1beta/models/*', '/v1/models/*', '/v1/projects/*', '/v1beta1/projects/*'])
    app.post(prefix, format(geminiMaxTokens, serveGemini))
  app.post('/v2/chat', format(cohereMaxTokens, serveCohere))
  app.post('/api/chat', format(ollamaMaxTokens, serveOllama))
  app.post('/api/generate', format(ollamaMaxTokens, serveOllama))
  app.post('/generate_stream', format(tgiMaxTokens, serveTgi))
  app.post('/generate', format(tgiMaxTokens, serveTgi))
  app.get('/v1/models', async () => ({
    object: 'list',
    data: [{ id: cfg.model, object: 'model', created: 0, owned_by: 'tokentap' }],
  }))
  // WebSocket upgrades are answered outside the router.
  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy())
    const path = (req.url ?? '/').split('?')[0]
    if (path === '/v1/realtime') serveOpenAIRealtime(cfg, req, socket, () => seq++)
    else if (
      /^\/ws\/google\.ai\.generativelanguage\.v1(alpha|beta)?\.GenerativeService\.BidiGenerateContent$/.test(path)
    )
      serveGeminiLive(cfg, req, socket, () => seq++)
    else socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
  })
  return app
}

interface Meta {
  id: string
  created: number
  model: string
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number }
}

function wholeAnswer(res: ServerResponse, api: Api, plan: SimPlan, meta: Meta): void {
  sendWhole(res, plan, () => {
    const text = plannedText(plan)
    return api === 'chat'
      ? {
          id: meta.id,
          object: 'chat.completion',
          created: meta.created,
          model: meta.model,
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: text, refusal: null },
              logprobs: null,
              finish_reason: 'stop',
            },
          ],
          usage: meta.usage,
          system_fingerprint: null,
        }
      : {
          id: meta.id,
          object: 'text_completion',
          created: meta.created,
          model: meta.model,
          choices: [{ index: 0, text, logprobs: null, finish_reason: 'stop' }],
          usage: meta.usage,
        }
  })
}

/** OpenAI Chat Completions / legacy Completions chunks, each stamped with its send time. */
function openAIFormat(api: Api, meta: Meta & { includeUsage: boolean }): StreamFormat {
  const head = `{"id":"${meta.id}","object":"${api === 'chat' ? 'chat.completion.chunk' : 'text_completion'}","created":${meta.created},"model":${JSON.stringify(meta.model)}`
  const event = (choices: string, extra = ''): string =>
    `data: ${head},"tokentap_sent_ms":${wallMs().toFixed(3)},"choices":[${choices}]${extra}}\n\n`
  return {
    contentType: 'text/event-stream; charset=utf-8',
    // Like the real API, the first chat event carries only the role: it is not a token.
    head: () =>
      api === 'chat'
        ? event(
            `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}`,
          )
        : '',
    content: (_index, text) =>
      api === 'chat'
        ? event(`{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null}`)
        : event(`{"text":${JSON.stringify(text)},"index":0,"logprobs":null,"finish_reason":null}`),
    error: () => `data: ${errorBody(500, 'simulated error inside the stream')}\n\n`,
    tail: () => {
      const finish =
        api === 'chat'
          ? `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}`
          : `{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}`
      let tail = event(finish)
      if (meta.includeUsage) tail += event('', `,"usage":${JSON.stringify(meta.usage)}`)
      return `${tail}data: [DONE]\n\n`
    },
  }
}

function streamAnswer(res: ServerResponse, api: Api, plan: SimPlan, meta: Meta & { includeUsage: boolean }): void {
  playStream(res, plan, openAIFormat(api, meta))
}
