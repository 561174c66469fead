import type { ServerResponse } from 'node:http'
import type { SimPlan } from './schedule.ts'
import { playStream, plannedText, plannedTokens, promptTokensOf, sendError, sendWhole } from './player.ts'
import type { SimRequest, StreamFormat } from './player.ts'
import { isSuccess } from '../http-status.ts'

/**
 * The simulator's Gemini API in its three framings, byte for byte as Google writes them (CRLF SSE, a
 * pretty-printed array, in-stream errors outside the framing): https://ai.google.dev/api/generate-content
 */

const MODEL_METHOD = /\/models\/([^/:?]+):([A-Za-z]+)/

/** `generationConfig.maxOutputTokens`, like OpenAI's `max_tokens` in the simulator: the answer's length. */
export function geminiMaxTokens(body: Record<string, unknown>): number | undefined {
  const config = body.generationConfig as Record<string, unknown> | undefined
  return typeof config === 'object' && config !== null && typeof config.maxOutputTokens === 'number'
    ? config.maxOutputTokens
    : undefined
}

const STATUS: Record<number, string> = {
  400: 'INVALID_ARGUMENT',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  429: 'RESOURCE_EXHAUSTED',
  500: 'INTERNAL',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
}

const errorBody = (code: number, message: string): unknown => ({
  error: { code, message, status: STATUS[code] ?? 'UNKNOWN' },
})

export function serveGemini(res: ServerResponse, plan: SimPlan, req: SimRequest): void {
  const q = req.url.indexOf('?')
  const path = q < 0 ? req.url : req.url.slice(0, q)
  const query = new URLSearchParams(q < 0 ? '' : req.url.slice(q + 1))
  const m = MODEL_METHOD.exec(path)
  const model = m === null ? req.defaultModel : decodeURIComponent(m[1])
  const method = m?.[2]
  if (method !== 'generateContent' && method !== 'streamGenerateContent') {
    sendError(res, 404, errorBody(404, `method ${method ?? '(none)'} is not simulated`))
    return
  }
  if (plan.status !== undefined && !isSuccess(plan.status)) {
    sendError(res, plan.status, errorBody(plan.status, `simulated ${plan.status}`))
    return
  }
  const prompt = promptTokensOf([req.body.systemInstruction, req.body.contents])
  const responseId = `sim${req.seq}`
  const usage = (candidates: number) => ({
    promptTokenCount: prompt,
    candidatesTokenCount: candidates,
    totalTokenCount: prompt + candidates,
    promptTokensDetails: [{ modality: 'TEXT', tokenCount: prompt }],
  })
  const chunk = (text: string, candidates: number, last: boolean) => ({
    candidates: [
      { content: { parts: [{ text }], role: 'model' }, ...(last ? { finishReason: 'STOP' } : {}), index: 0 },
    ],
    usageMetadata: usage(candidates),
    modelVersion: model,
    responseId,
  })

  if (method === 'generateContent') {
    sendWhole(res, plan, () => chunk(plannedText(plan), plannedTokens(plan), true))
    return
  }
  let sent = 0
  const next = (i: number, text: string, last: boolean) => {
    sent += plan.chunks[i].tokens
    return chunk(text, sent, last)
  }
  const inStreamError = errorBody(500, 'simulated error inside the stream')
  const format: StreamFormat =
    query.get('alt') === 'sse'
      ? {
          contentType: 'text/event-stream',
          head: () => '',
          content: (i, text, last) => `data: ${JSON.stringify(next(i, text, last))}\r\n\r\n`,
          error: () => `${JSON.stringify(inStreamError, null, 2)}\n`,
          tail: () => '',
        }
      : {
          contentType: 'application/json; charset=UTF-8',
          head: () => '',
          content: (i, text, last) => `${i === 0 ? '[' : '\n,\r\n'}${JSON.stringify(next(i, text, last), null, 2)}`,
          error: () => `${sent === 0 ? '[' : '\n,\r\n'}${JSON.stringify(inStreamError, null, 2)}\n]`,
          tail: () => (sent === 0 ? '[]' : '\n]'),
        }
  playStream(res, plan, format)
}
