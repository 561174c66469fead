import { request } from 'node:http'
import type { ClientRequest, IncomingMessage, OutgoingHttpHeaders } from 'node:http'

/** Small tools for fault tests: polling, raw HTTP clients, OpenAI-shaped SSE events. */

/** Polls `check` every 5 ms until it returns true; rejects after `timeoutMs`. */
export async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

/** One OpenAI chat completion chunk as an SSE event. */
export function chatEvent(text: string, model = 'gpt-4o-mini'): string {
  return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"${model}","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"finish_reason":null}]}\n\n`
}

export const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } as const

export interface RawResponse {
  readonly res: IncomingMessage
  readonly req: ClientRequest
}

/** Starts a raw request (node:http, so any header can be sent) and resolves with the response head. */
export function rawRequest(url: string, opts: { method?: string; headers?: OutgoingHttpHeaders; body?: Buffer | string; agent?: false } = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method ?? 'POST', headers: opts.headers, agent: opts.agent ?? false }, (res) => resolve({ res, req }))
    req.on('error', reject)
    if (opts.body !== undefined) req.end(opts.body)
    else req.end()
  })
}

/** Reads a response to its end: resolves with the bytes, or rejects when the stream breaks. */
export function readAll(res: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = []
    res.on('data', (c: Buffer) => parts.push(c))
    res.on('end', () => resolve(Buffer.concat(parts)))
    res.on('error', reject)
    res.on('aborted', () => reject(new Error('aborted')))
    res.on('close', () => {
      if (!res.complete) reject(new Error('response closed before its end'))
    })
  })
}

/** A chat completion request body. */
export function chatBody(model = 'gpt-4o-mini', extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'hi' }], ...extra })
}
