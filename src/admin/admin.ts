import Fastify, { LogController } from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { Config } from '../config/schema.ts'
import type { MetricsSource } from '../metrics/prometheus/source.ts'
import type { Exchange } from '../proxy/exchange.ts'
import { requireToken } from './auth.ts'
import { debugStreamsRoute } from './debug-streams.ts'
import type { StreamsSnapshot } from './debug-streams.ts'
import { healthRoutes } from './health.ts'
import { metricsRoute } from './metrics-route.ts'
import { registerLive, SELF_AUTHENTICATED_ROUTES } from './live/register-live.ts'
import type { ClusterLive } from './live/register-live.ts'
import type { LiveStore } from './live/live-store.ts'
import { listenerTlsOptions } from '../listener-tls.ts'

/**
 * The admin listener, on its own port and its own Fastify instance: `GET /metrics`, `/healthz`,
 * `/readyz`, `/debug/streams`, the live page (`/`, `/live/events`) and `/debug/requests/{id}`. With `admin.token` set, every route but the health checks wants
 * `Authorization: Bearer <token>`. Each route group is one file in src/admin/; a new group is
 * one more entry in ADMIN_ROUTES.
 */

/** What the admin listener reads: a single process's `Tokentap` state, or the cluster primary's. */
export interface AdminState {
  readonly config: Config
  readonly logger: Logger
  /** The metrics `/metrics` serves: this process's registry, or the cluster primary's sum. */
  readonly registry: MetricsSource
  /** /readyz answers 503 while true. */
  readonly draining: boolean
  /** Requests in flight in this process (absent in the cluster primary, which proxies nothing). */
  readonly active?: ReadonlySet<Exchange>
  /** Finished requests for the live page and /debug/requests (in the cluster primary, fed by its workers). */
  readonly live?: LiveStore
  /** The monotonic clock (ms) the exchanges' times come from. */
  readonly now: () => number
  /** The cluster primary's questions to its workers (absent in a process that proxies). */
  readonly cluster?: ClusterAdmin
}

/** What the cluster primary's admin routes ask its workers (cluster.ts). */
interface ClusterAdmin extends ClusterLive {
  /** The workers' /debug/streams snapshots, merged. */
  readonly streams: () => Promise<StreamsSnapshot>
}

/** Registers one group of admin routes. */
export type AdminRoutes = (admin: FastifyInstance, state: AdminState) => void

/** The admin routes, in registration order. */
export const ADMIN_ROUTES: readonly AdminRoutes[] = [
  (admin, state) => metricsRoute(admin, state.registry),
  (admin, state) => debugStreamsRoute(admin, state.active, state.now, state.cluster?.streams),
  registerLive,
  healthRoutes,
]

export function buildAdmin(state: AdminState, routes: readonly AdminRoutes[] = ADMIN_ROUTES): FastifyInstance {
  const https = listenerTlsOptions(state.config.admin.tls, 'admin.tls')
  const admin = Fastify({
    loggerInstance: state.logger.child({ listener: 'admin' }),
    logController: new LogController({ disableRequestLogging: true }),
    ...(https === undefined ? {} : { https }),
  }) as unknown as FastifyInstance
  const token = state.config.admin.token
  if (token !== undefined) requireToken(admin, token, SELF_AUTHENTICATED_ROUTES)
  for (const register of routes) register(admin, state)
  return admin
}
