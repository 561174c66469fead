import { timingSafeEqual } from 'node:crypto'
import Fastify, { LogController } from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { Config } from '../config/schema.ts'
import { PROMETHEUS_CONTENT_TYPE } from './registry.ts'

/**
 * The admin listener, on its own port: `GET /metrics` (Prometheus text format),
 * `/healthz` (the process is alive) and `/readyz` (it takes traffic; 503 while draining).
 * With `admin.token` set, /metrics wants `Authorization: Bearer <token>`.
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
  readonly registry: { render(): Promise<string> }
  readonly draining: boolean
}

export function buildAdmin(state: AdminState): FastifyInstance {
  const admin = Fastify({ loggerInstance: state.logger.child({ listener: 'admin' }), logController: new LogController({ disableRequestLogging: true }) }) as unknown as FastifyInstance
  const token = state.config.admin.token

  admin.get('/metrics', async (request, reply) => {
    if (token !== undefined && !tokenMatches(request.headers.authorization, token)) {
      return reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'a bearer token is required for /metrics' })
    }
    const body = await state.registry.render()
    return reply.header('content-type', PROMETHEUS_CONTENT_TYPE).send(body)
  })
  admin.get('/healthz', async () => ({ status: 'ok' }))
  admin.get('/readyz', async (_request, reply) => {
    if (state.draining) return reply.code(503).send({ status: 'draining' })
    return { status: 'ready' }
  })
  return admin
}
