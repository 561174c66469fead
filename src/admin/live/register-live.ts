import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type { ServerResponse } from 'node:http'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance, FastifyReply } from 'fastify'
import { allowed, setCookie, tokenGiven } from '../auth.ts'
import { buildMessage } from './live-message.ts'
import type { Cursors, InFlight } from './live-message.ts'
import type { LiveStore } from './live-store.ts'
import { requestView } from './recent-requests.ts'
import { PAGE_HTML } from './page.ts'
import { ProcessFigures } from './process-figures.ts'

/**
 * The admin listener's live views: `GET /` (the live page), `GET /live/events` (its
 * server-sent events, one message a second), `/live/app.js` (client/app.ts) and uPlot from node_modules, and
 * `GET /debug/requests/{id}` (a finished request, or a realtime session with its responses). `admin.token` applies to the page, its events and the requests
 * (see auth.ts for how a browser shows it); the scripts are public code.
 */

export interface LiveState {
  readonly config: { readonly admin: { readonly token?: string }; readonly debug: { readonly recent_requests: number } }
  /** Absent in the cluster primary, which proxies nothing. */
  readonly live?: LiveStore
  readonly active?: ReadonlySet<InFlight>
  /** The monotonic clock (ms) the requests' times come from. */
  readonly now: () => number
  /** The cluster primary's views of its workers (absent in a process that proxies). */
  readonly cluster?: ClusterLive
}

/**
 * What the cluster primary adds (cluster.ts): `active` is a mirror of the workers' oldest streams,
 * kept fresh while `watch(true)` (a live page is open); `/debug/requests/{id}` asks the workers.
 */
export interface ClusterLive {
  /** The mirror of the workers' streams in flight (the oldest of each). */
  readonly active: ReadonlySet<InFlight>
  /** Requests in flight in all workers. */
  readonly inFlight: () => number
  readonly watch: (watching: boolean) => void
  /** A finished request's or realtime session's view from whichever worker has it; null when none. */
  readonly lookup: (id: string) => Promise<Record<string, unknown> | null>
}

/** One message a second. */
const EVENT_INTERVAL_MS = 1000
/** SSE clients at once (each costs a socket and its unsent bytes). */
const MAX_CLIENTS = 32
/** A client with this much unsent is too slow and is dropped (bounded memory). */
const MAX_BUFFERED = 4 * 1024 * 1024

const require = createRequire(import.meta.url)
/**
 * The page's script, emitted beside this module by the build (scripts/build-client.mjs); from
 * the sources (tap's TypeScript loader), the one in dist/.
 */
const SCRIPT_FILES = ['./client/app.js', '../../../dist/src/admin/live/client/app.js'].map((p) => fileURLToPath(new URL(p, import.meta.url)))
let script: string | undefined
const pageScript = (): string => (script ??= readFileSync(SCRIPT_FILES.find((p) => existsSync(p)) ?? SCRIPT_FILES[0], 'utf8'))
let uplot: { js: string; css: string } | undefined
const uplotFiles = (): { js: string; css: string } =>
  (uplot ??= { js: readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'), css: readFileSync(require.resolve('uplot/dist/uPlot.min.css'), 'utf8') })

const unavailable = { error: 'this admin listener was given no live figures (no LiveStore)' }

/** Sends the shared message to every SSE client each second while there is one. */
class EventHub {
  readonly #clients = new Set<ServerResponse>()
  readonly #cursors: Cursors = new Map()
  readonly #live: LiveStore
  readonly #active: ReadonlySet<InFlight>
  readonly #now: () => number
  readonly #cluster: ClusterLive | undefined
  /** The process's CPU, event-loop delay, memory and identity (process-figures.ts). */
  readonly #process = new ProcessFigures()
  #timer: NodeJS.Timeout | undefined

  constructor(live: LiveStore, active: ReadonlySet<InFlight>, now: () => number, cluster: ClusterLive | undefined) {
    this.#live = live
    this.#active = active
    this.#now = now
    this.#cluster = cluster
  }

  get size(): number {
    return this.#clients.size
  }

  message(cursors: Cursors): string {
    const now = this.#now()
    const message = buildMessage(this.#live.stats, this.#active, now, cursors, this.#live.stallSeconds, this.#cluster?.inFlight() ?? this.#active.size)
    message.realtime = this.#live.realtime.message(now)
    message.process = this.#process.read()
    return `data: ${JSON.stringify(message)}\n\n`
  }

  add(res: ServerResponse): void {
    if (this.#clients.size === 0) this.#cluster?.watch(true)
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
    this.#cluster?.watch(false)
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

/**
 * The live routes check `admin.token` themselves (a browser shows it once and then carries a
 * cookie, see auth.ts; the scripts are public), so the listener's bearer-token hook lets them by.
 */
export const SELF_AUTHENTICATED_ROUTES: ReadonlySet<string> = new Set(['/', '/live/app.js', '/live/uplot.js', '/live/uplot.css', '/live/events', '/debug/requests/:id'])

/** Adds the live routes to the admin instance. */
export function registerLive(admin: FastifyInstance, state: LiveState): void {
  const token = state.config.admin.token
  const active = state.cluster?.active ?? state.active
  const hub = state.live !== undefined && active !== undefined ? new EventHub(state.live, active, state.now, state.cluster) : undefined
  // Open event streams would hold close() for ever.
  admin.addHook('preClose', async () => hub?.close())

  admin.get('/', async (request, reply) => {
    const query = request.query as Record<string, unknown>
    if (token !== undefined && query.token !== undefined) {
      if (!tokenGiven(query.token, token)) return reply.code(401).type('text/plain; charset=utf-8').send('wrong token')
      return reply.code(303).header('set-cookie', setCookie(token)).header('location', '/').header('cache-control', 'no-store').send()
    }
    if (!allowed(request.headers, token)) {
      return reply
        .code(401)
        .header('www-authenticate', 'Bearer')
        .type('text/plain; charset=utf-8')
        .send('admin.token is set: open /?token=<the token> once (it is kept in an HttpOnly cookie), or send Authorization: Bearer <token>')
    }
    return reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(PAGE_HTML)
  })
  // Browsers ask for it beside the page: an empty answer, not a 404 in their console.
  admin.get('/favicon.ico', async (_request, reply) => reply.code(204).header('cache-control', 'max-age=86400').send())
  admin.get('/live/app.js', async (_request, reply) => reply.type('text/javascript; charset=utf-8').send(pageScript()))
  admin.get('/live/uplot.js', async (_request, reply) => reply.type('text/javascript; charset=utf-8').header('cache-control', 'max-age=3600').send(uplotFiles().js))
  admin.get('/live/uplot.css', async (_request, reply) => reply.type('text/css; charset=utf-8').header('cache-control', 'max-age=3600').send(uplotFiles().css))

  admin.get('/live/events', async (request, reply) => {
    if (!allowed(request.headers, token)) return denied(reply, '/live/events')
    if (hub === undefined) return reply.code(501).send(unavailable)
    if (hub.size >= MAX_CLIENTS) return reply.code(503).send({ error: `at most ${MAX_CLIENTS} live pages at once` })
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' })
    hub.add(res)
  })

  admin.get('/debug/requests/:id', async (request, reply) => {
    if (!allowed(request.headers, token)) return denied(reply, '/debug/requests')
    const id = (request.params as { id: string }).id
    if (state.cluster !== undefined) {
      const view = await state.cluster.lookup(id)
      if (view !== null) return reply.header('cache-control', 'no-store').send(view)
      return reply.code(404).send({ error: `no finished request with id '${id.slice(0, 200)}' among any worker's last ${state.config.debug.recent_requests}`, request_id: id.slice(0, 200) })
    }
    if (state.live === undefined) return reply.code(501).send(unavailable)
    const found = state.live.recent.get(id)
    // A realtime session's id: its figures and its last responses.
    const session = found === undefined ? state.live.realtime.sessionView(id, state.now(), Date.now()) : undefined
    if (session !== undefined) return reply.header('cache-control', 'no-store').send(session)
    if (found === undefined) {
      return reply.code(404).send({ error: `no finished request with id '${id.slice(0, 200)}' among the last ${state.live.recent.capacity}`, request_id: id.slice(0, 200) })
    }
    return reply.header('cache-control', 'no-store').send(requestView(found, state.now(), Date.now()))
  })
}
