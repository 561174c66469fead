import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'
import Fastify from 'fastify'
import type { FastifyRequest } from 'fastify'
import { Agent, type Dispatcher } from 'undici'
import { PROXY_METHODS } from '../src/proxy/route-path.ts'

/**
 * The bench's Node relay: tokentap's stack (node:http in, a keep-alive undici Agent out, with
 * backpressure) and nothing else: what a Node proxy costs before measuring anything. `--fastify`:
 * the same behind a Fastify catch-all route set up as tokentap's (a body parser that reads nothing,
 * the reply hijacked), the `fastify-relay` path. `--port 0 --upstream URL [--fastify]`; prints `{"port":N}`.
 */

const { values } = parseArgs({
  options: { port: { type: 'string', default: '0' }, upstream: { type: 'string' }, fastify: { type: 'boolean', default: false } },
})
if (values.upstream === undefined) throw new Error('--upstream is required')
const origin = new URL(values.upstream).origin
const agent = new Agent({ pipelining: 1, bodyTimeout: 0 })
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host', 'te', 'trailer', 'upgrade', 'proxy-connection'])

function endToEnd(raw: readonly (string | Buffer)[]): string[] {
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) {
    const name = String(raw[i])
    if (!HOP_BY_HOP.has(name.toLowerCase())) out.push(name, String(raw[i + 1]))
  }
  return out
}

function relay(req: http.IncomingMessage, res: http.ServerResponse): void {
  const parts: Buffer[] = []
  req.on('data', (b: Buffer) => parts.push(b))
  req.on('end', () => {
    let controller: Dispatcher.DispatchController | undefined
    res.on('drain', () => controller?.resume())
    res.on('close', () => {
      if (!res.writableFinished) controller?.abort(new Error('client closed'))
    })
    agent.dispatch(
      { origin, path: req.url ?? '/', method: req.method as Dispatcher.HttpMethod, headers: endToEnd(req.rawHeaders), body: Buffer.concat(parts) },
      {
        onRequestStart(c) {
          controller = c
        },
        onResponseStart(c, statusCode) {
          const raw = (c as unknown as { rawHeaders: Buffer[] }).rawHeaders
          res.writeHead(statusCode, endToEnd(raw))
        },
        onResponseData(c, chunk) {
          if (!res.write(chunk)) c.pause()
        },
        onResponseEnd() {
          res.end()
        },
        onResponseError(_c, err) {
          if (res.headersSent) res.destroy()
          else res.writeHead(502).end(String(err))
        },
      },
    )
  })
}

function printPort(server: http.Server): void {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`)
}

if (values.fastify) {
  // tokentap's app options on the proxy path (src/app.ts, src/plugin.ts), without its hooks.
  const app = Fastify({ logger: false, routerOptions: { maxParamLength: 65_536, ignoreDuplicateSlashes: false }, keepAliveTimeout: 60_000 })
  app.removeAllContentTypeParsers()
  const unread = (_request: FastifyRequest, _payload: unknown, done: (err: null) => void): void => done(null)
  app.addContentTypeParser(/^/, unread)
  app.addContentTypeParser('*', unread)
  app.route({
    method: [...PROXY_METHODS],
    url: '/*',
    exposeHeadRoute: false,
    handler(request, reply) {
      reply.hijack()
      relay(request.raw, reply.raw)
    },
  })
  await app.listen({ host: '127.0.0.1', port: Number(values.port) })
  printPort(app.server)
} else {
  const server = http.createServer(relay)
  server.keepAliveTimeout = 60_000
  server.listen(Number(values.port), '127.0.0.1', () => printPort(server))
}
