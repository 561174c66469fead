/** Small tools for fault tests: polling, OpenAI-shaped SSE events (raw HTTP clients are in http.ts, re-exported). */

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

export { openRequest, readAll } from './http.ts'

/** A chat completion request body. */
export function chatBody(model = 'gpt-4o-mini', extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'hi' }], ...extra })
}
