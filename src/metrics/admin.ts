import { timingSafeEqual } from 'node:crypto'
import Fastify, { LogController } from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import type { Config } from '../config/schema.ts'
import type { Exchange } from '../proxy/exchange.ts'
import { OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE } from './registry.ts'
import { wantsOpenMetrics } from './openmetrics.ts'
import { snapshotStreams } from '../proxy/debug-streams.ts'
import { listenerTlsOptions } from '../listener-tls.ts'

/**
 * The admin listener, on its own port: `GET /metrics` (Prometheus text format, or OpenMetrics
 * with exemplars when the scraper's Accept asks for it), `/healthz` (the process is alive),
 * `/readyz` (it takes traffic; 503 while draining) and `/debug/streams` (streams in flight).
 * With `admin.token` set, /metrics and /debug/streams want `Authorization: Bearer <token>`.
 */

function tokenMatches(header: string | undefined, token: string): boolean {
  if (header === undefined || !header.startsWith('Bearer ')) return false
  const given = Buffer.from(header.slice(7))
  const want = Buffer.from(token)
  return given.length === want.length && timingSafeEqual(given, want)
}

/** What the admin listener reads: a single process's `Tokentap` state, or the cluster primary's. */
export interface AdminState {
  readonly config: Config
  readonly logger: Logger
  /**
   * `supportsOpenMetrics`: `render(true)`/`exposition(true)` write OpenMetrics (the cluster primary's
   * sum does not); `exposition()` (a process's own registry) streams the scrape in slices, else `render()`.
   */
  readonly registry: { render(openMetrics?: boolean): Promise<string>; exposition?(openMetrics?: boolean): AsyncIterable<Buffer[]>; readonly supportsOpenMetrics?: boolean }
  readonly draining: boolean
  /** Requests in flight in this process (absent in the cluster primary, which proxies nothing). */
  readonly active?: ReadonlySet<Exchange>
}

/** Resolves when the response can take more (or is gone: a scraper that left stops the scrape). */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    if (res.destroyed) return resolve()
    const done = (): void => {
      res.off('drain', done)
      res.off('close', done)
      resolve()
    }
    res.on('drain', done)
    res.on('close', done)
  })
}

export function buildAdmin(state: AdminState): FastifyInstance {
  const https = listenerTlsOptions(state.config.admin.tls, 'admin.tls')
  const admin = Fastify({ loggerInstance: state.logger.child({ listener: 'admin' }), logController: new LogController({ disableRequestLogging: true }), ...(https === undefined ? {} : { https }) }) as unknown as FastifyInstance
  const token = state.config.admin.token

  admin.get('/metrics', async (request, reply) => {
    if (token !== undefined && !tokenMatches(request.headers.authorization, token)) {
      return reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'a bearer token is required for /metrics' })
    }
    const registry = state.registry
    const openMetrics = registry.supportsOpenMetrics === true && wantsOpenMetrics(request.headers.accept)
    const contentType = openMetrics ? OPENMETRICS_CONTENT_TYPE : PROMETHEUS_CONTENT_TYPE
    if (registry.exposition === undefined) return reply.header('content-type', contentType).header('vary', 'accept').send(await registry.render(openMetrics))
    // Streamed as it is rendered (chunked), in slices, at the pace the scraper reads. Not gzipped
    // although Prometheus asks: compressing the series that changed costs more CPU than the
    // writes it saves (measured with bench/scrape.ts; see the commit removing gzip-blocks.ts).
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, { 'content-type': contentType, vary: 'accept' })
    try {
      for await (const batch of registry.exposition(openMetrics)) {
        if (res.destroyed) break
        // One writev for the batch: each buffer is a chunk of the chunked body, none is copied.
        res.cork()
        let more = true
        for (const b of batch) more = res.write(b)
        res.uncork()
        // Node 26 can flush and emit 'drain' inside uncork(): only wait for a drain still to come.
        if (!more && res.writableNeedDrain) await drained(res)
      }
      if (!res.destroyed) res.end()
    } catch (err) {
      // The status is sent: cutting the body short is how the scraper learns of the failure.
      request.log.error({ err }, 'scrape failed')
      res.destroy()
    }
  })
  admin.get('/debug/streams', async (request, reply) => {
    if (token !== undefined && !tokenMatches(request.headers.authorization, token)) {
      return reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'a bearer token is required for /debug/streams' })
    }
    if (state.active === undefined) {
      return reply.code(501).send({ error: '/debug/streams lists one process’s streams; with server.workers > 1 the primary runs none' })
    }
    return reply.header('cache-control', 'no-store').send(snapshotStreams(state.active))
  })
  admin.get('/healthz', async () => ({ status: 'ok' }))
  admin.get('/readyz', async (_request, reply) => {
    if (state.draining) return reply.code(503).send({ status: 'draining' })
    return { status: 'ready' }
  })
  return admin
}
