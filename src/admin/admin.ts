import Fastify, { LogController } from 'fastify'
import type { FastifyInstance } from 'fastify'
import { requireToken } from './auth.ts'
import { debugStreamsRoute } from './debug-streams.ts'
import { healthRoutes } from './health.ts'
import { metricsRoute } from './metrics-route.ts'
import { registerLive, SELF_AUTHENTICATED_ROUTES } from './live/register-live.ts'
import type { AdminSource } from './source.ts'
import { listenerTlsOptions } from '../listener-tls.ts'

/**
 * The admin listener, on its own port and Fastify instance; with `admin.token` every route but the
 * health checks wants a bearer token (auth.ts). A new route group is one more entry in ADMIN_ROUTES.
 */

export type AdminRoutes = (admin: FastifyInstance, source: AdminSource) => void

export const ADMIN_ROUTES: readonly AdminRoutes[] = [
  (admin, source) => metricsRoute(admin, source.metrics),
  debugStreamsRoute,
  registerLive,
  healthRoutes,
]

/** The admin listener over `source` (source.ts: one process's, or the cluster primary's). */
export function buildAdmin(source: AdminSource, routes: readonly AdminRoutes[] = ADMIN_ROUTES): FastifyInstance {
  const https = listenerTlsOptions(source.config.admin.tls, 'admin.tls')
  const admin = Fastify({
    loggerInstance: source.logger.child({ listener: 'admin' }),
    logController: new LogController({ disableRequestLogging: true }),
    ...(https === undefined ? {} : { https }),
  }) as unknown as FastifyInstance
  const token = source.config.admin.token
  if (token !== undefined) requireToken(admin, token, SELF_AUTHENTICATED_ROUTES)
  for (const register of routes) register(admin, source)
  return admin
}
