import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type { ServerResponse } from 'node:http'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance, FastifyReply } from 'fastify'
import { allowed, setCookie, tokenGiven } from '../auth.ts'
import { buildMessage } from './live-message.ts'
import type { Cursors } from './live-message.ts'
import type { AdminSource, LiveSource } from '../source.ts'
import { PAGE_HTML } from './page.ts'
import { ProcessFigures } from './process-figures.ts'

/**
 * The live views: `GET /`, `GET /live/events` (SSE, one message a second), the page's scripts
 * (public code) and `GET /debug/requests/{id}`; `admin.token` applies to all but the scripts.
 */

const EVENT_INTERVAL_MS = 1000
/** SSE clients at once (each costs a socket and its unsent bytes). */
const MAX_CLIENTS = 32
/** A client with this much unsent is too slow and is dropped (bounded memory). */
const MAX_BUFFERED = 4 * 1024 * 1024

const require = createRequire(import.meta.url)
/** The page's script as scripts/build-client.mjs emits it; run from the sources, the one in dist/. */
const SCRIPT_FILES = ['./client/app.js', '../../../dist/src/admin/live/client/app.js'].map((p) =>
  fileURLToPath(new URL(p, import.meta.url)),
)
let script: string | undefined
const pageScript = (): string =>
  (script ??= readFileSync(SCRIPT_FILES.find((p) => existsSync(p)) ?? SCRIPT_FILES[0], 'utf8'))
let uplot: { js: string; css: string } | undefined
const uplotFiles = (): { js: string; css: string } =>
  (uplot ??= {
    js: readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'),
    css: readFileSync(require.resolve('uplot/dist/uPlot.min.css'), 'utf8'),
  })

const unavailable = { error: 'this admin listener was given no live figures (no LiveStore)' }

/** Sends the shared message to every SSE client each second while there is one. */
class EventHub {
  readonly #clients = new Set<ServerResponse>()
  readonly #cursors: Cursors = new Map()
  readonly #live: LiveSource
  /** The process's CPU, event-loop delay, memory and identity (process-figures.ts). */
  readonly #process = new ProcessFigures()
  #timer: NodeJS.Timeout | undefined

  constructor(live: LiveSource) {
    this.#live = live
  }

  get size(): number {
    return this.#clients.size
  }

  message(cursors: Cursors): string {
    const live = this.#live
    const now = live.now()
    const message = buildMessage(live.store.stats, live.active, now, cursors, live.store.stallSeconds, live.inFlight())
    message.realtime = live.store.realtime.message(now)
    message.process = this.#process.read()
    return `data: ${JSON.stringify(message)}\n\n`
  }

  add(res: ServerResponse): void {
    if (this.#clients.size === 0) this.#live.watch(true)
    this.#clients.add(res)
    res.on('close', () => {
      this.#clients.delete(res)
      if (this.#clients.size === 0) this.stop()
    })
    this.#process.start()
    // A new client's first message has its own cursors: the strip's last 30 s of every stream.
    res.write(`retry: 2000\n\n${this.message(new Map())}`)
    this.#timer ??= setInterval(() => this.#tick(), EVENT_INTERVAL_MS).unref()
  }

  #tick(): void {
    const text = this.message(this.#cursors)
    for (const res of this.#clients) {
      if (res.writableLength > MAX_BUFFERED) res.destroy()
      else res.write(text)
    }
  }

  stop(): void {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#live.watch(false)
    this.#process.stop()
  }

  close(): void {
    this.stop()
    for (const res of this.#clients) res.end()
  }
}

function denied(reply: FastifyReply, what: string): FastifyReply {
  return reply
    .code(401)
    .header('www-authenticate', 'Bearer')
    .send({ error: `a bearer token (or the live page's cookie) is required for ${what}` })
}

/** The live routes check `admin.token` themselves (a browser carries a cookie, auth.ts), so the bearer hook lets them by. */
export const SELF_AUTHENTICATED_ROUTES: ReadonlySet<string> = new Set([
  '/',
  '/live/app.js',
  '/live/uplot.js',
  '/live/uplot.css',
  '/live/events',
  '/debug/requests/:id',
])

export function registerLive(admin: FastifyInstance, source: AdminSource): void {
  const token = source.config.admin.token
  const live = source.live
  const hub = live === undefined ? undefined : new EventHub(live)
  // Open event streams would hold close() for ever.
  admin.addHook('preClose', async () => hub?.close())

  admin.get('/', async (request, reply) => {
    const query = request.query as Record<string, unknown>
    if (token !== undefined && query.token !== undefined) {
      if (!tokenGiven(query.token, token)) return reply.code(401).type('text/plain; charset=utf-8').send('wrong token')
      return reply
        .code(303)
        .header('set-cookie', setCookie(token))
        .header('location', '/')
        .header('cache-control', 'no-store')
        .send()
    }
    if (!allowed(request.headers, token)) {
      return reply
        .code(401)
        .header('www-authenticate', 'Bearer')
        .type('text/plain; charset=utf-8')
        .send(
          'admin.token is set: open /?token=<the token> once (it is kept in an HttpOnly cookie), or send Authorization: Bearer <token>',
        )
    }
    return reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(PAGE_HTML)
  })
  // Browsers ask for it beside the page: an empty answer, not a 404 in their console.
  admin.get('/favicon.ico', async (_request, reply) => reply.code(204).header('cache-control', 'max-age=86400').send())
  admin.get('/live/app.js', async (_request, reply) => reply.type('text/javascript; charset=utf-8').send(pageScript()))
  admin.get('/live/uplot.js', async (_request, reply) =>
    reply.type('text/javascript; charset=utf-8').header('cache-control', 'max-age=3600').send(uplotFiles().js),
  )
  admin.get('/live/uplot.css', async (_request, reply) =>
    reply.type('text/css; charset=utf-8').header('cache-control', 'max-age=3600').send(uplotFiles().css),
  )

  admin.get('/live/events', async (request, reply) => {
    if (!allowed(request.headers, token)) return denied(reply, '/live/events')
    if (hub === undefined) return reply.code(501).send(unavailable)
    if (hub.size >= MAX_CLIENTS) return reply.code(503).send({ error: `at most ${MAX_CLIENTS} live pages at once` })
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-accel-buffering': 'no',
    })
    hub.add(res)
  })

  admin.get('/debug/requests/:id', async (request, reply) => {
    if (!allowed(request.headers, token)) return denied(reply, '/debug/requests')
    const id = (request.params as { id: string }).id
    if (live === undefined) return reply.code(501).send(unavailable)
    const view = await live.lookup(id)
    if (view !== null) return reply.header('cache-control', 'no-store').send(view)
    return reply.code(404).send({
      error: `no finished request with id '${id.slice(0, 200)}' among ${live.searched}`,
      request_id: id.slice(0, 200),
    })
  })
}
