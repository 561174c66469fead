import http from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * The upstream of the bench's one very long stream (bench/growth.ts), in the benchmark's own
 * process: the simulator's explicit plans stop at 100,000 chunks. It answers a chat request whose
 * body says `long_chunks: N` with N OpenAI-style content events, written as fast as the socket
 * takes them (16 to a write, waiting for `drain` whenever a write is refused, so the proxy's
 * backpressure holds), then keeps the stream open until `finish()`, when it sends the last event
 * and `[DONE]`: the proxy's memory can be read with the stream open and past its last content
 * event, and again once it has ended.
 */

export interface LongUpstream {
  readonly port: number
  /** Ends the open stream (its finish event and [DONE]). */
  finish(): void
  close(): Promise<void>
}

const event = (delta: string, finish = 'null'): string =>
  `data: {"id":"chatcmpl-long","object":"chat.completion.chunk","created":0,"model":"long-model","choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}]}\n\n`
const CONTENT = event('{"content":" w"}')
const BATCH = 16

export async function startLongUpstream(): Promise<LongUpstream> {
  let open: http.ServerResponse | undefined
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (b: Buffer) => parts.push(b))
    req.on('end', () => {
      let n = 0
      try {
        n = Number((JSON.parse(Buffer.concat(parts).toString('utf8')) as { long_chunks?: number }).long_chunks ?? 0)
      } catch {
        // not ours: an empty stream
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      res.write(event('{"role":"assistant","content":""}'))
      const batch = CONTENT.repeat(BATCH)
      let sent = 0
      const pump = (): void => {
        while (sent < n && !res.destroyed) {
          const k = Math.min(BATCH, n - sent)
          sent += k
          if (!res.write(k === BATCH ? batch : CONTENT.repeat(k))) {
            res.once('drain', pump)
            return
          }
        }
        if (!res.destroyed) open = res
      }
      pump()
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    port: (server.address() as AddressInfo).port,
    finish() {
      open?.end(`${event('{}', '"stop"')}data: [DONE]\n\n`)
      open = undefined
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections()
        server.close(() => r())
      }),
  }
}

/** A request body for the long upstream: `chunks` content events. */
export const longBody = (chunks: number): string => JSON.stringify({ model: 'long-model', stream: true, messages: [{ role: 'user', content: 'bench' }], long_chunks: chunks })
