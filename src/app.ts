import Fastify, { LogController } from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import type { Config } from './config/schema.ts'
import { createLogger } from './logger.ts'
import { buildAdmin } from './admin/admin.ts'
import { lingerForScrape } from './admin/linger.ts'
import { localAdminSource } from './admin/source.ts'
import { LiveStore } from './admin/live/live-store.ts'
import { listenerTlsOptions } from './listener-tls.ts'
import type { OtelMetrics } from './metrics/otel/otel-metrics.ts'
import { configureListener } from './proxy/listener.ts'
import { frameworkError, notFound } from './proxy/not-found.ts'
import tokentap from './plugin.ts'
import type { TokentapState } from './plugin.ts'

/** buildApp(config): the tokentap plugin (src/plugin.ts) on a Fastify instance, with the admin instance in `app.tokentap`; never listens. */

export interface Tokentap extends TokentapState {
  /** The admin listener's instance (/metrics, health, debug views). */
  readonly admin: FastifyInstance
  /** The OTel GenAI metrics (`flush()` exports now), when enabled; the plugin's `otelMetrics`. */
  readonly otel?: OtelMetrics
  /** Finished requests for the live page and /debug/requests/{id}. */
  readonly live: LiveStore
}

export type TokentapApp = FastifyInstance & { readonly tokentap: Tokentap }

export interface BuildOptions {
  /** A pino logger to use (tests pass a silent or capturing one). */
  readonly logger?: Logger
  /** The upstream dispatcher (default: a pooled undici Agent with the configured timeouts). */
  readonly dispatcher?: Dispatcher
  /** The monotonic clock in ms (default: src/clock.ts). */
  readonly now?: () => number
  /** @internal The plugin's `warnOnFold` (false in a cluster worker: src/cluster/worker.ts). */
  readonly warnOnFold?: boolean
}

export async function buildApp(config: Config, options: BuildOptions = {}): Promise<TokentapApp> {
  const logger = options.logger ?? createLogger(config)
  const https = listenerTlsOptions(config.server.tls, 'server.tls')
  const app = Fastify({
    loggerInstance: logger,
    // tokentap writes its own line per request (request-log.ts); Fastify's would double it.
    logController: new LogController({ disableRequestLogging: true }),
    // A pino child per request costs a short stream CPU; proxy lines carry request_id instead.
    childLoggerFactory: (logger) => logger,
    // Never reject a long path the upstream would take.
    routerOptions: { maxParamLength: 65_536, ignoreDuplicateSlashes: false },
    bodyLimit: config.server.body_limit_bytes,
    return503OnClosing: true,
    // Fastify's own errors (a bad URL) echo what the client sent: answer in the proxy's shape instead.
    frameworkErrors: frameworkError,
    // close() ends idle keep-alive connections and lets requests in flight finish (graceful drain).
    forceCloseConnections: 'idle',
    keepAliveTimeout: config.server.keep_alive_timeout_ms,
    ...(https === undefined ? {} : { https }),
  }) as unknown as FastifyInstance

  configureListener(app.server, {
    requestHeadMs: config.server.request_head_timeout_ms,
    keepAliveMs: config.server.keep_alive_timeout_ms,
  })
  // Unmatched paths get the proxy's own JSON error, never Fastify's (which echoes the URL, query included).
  app.setNotFoundHandler(notFound)
  await app.register(tokentap, {
    config,
    dispatcher: options.dispatcher,
    now: options.now,
    logger,
    warnOnFold: options.warnOnFold,
  })
  const state = app.tokentap
  const live = new LiveStore({
    recentRequests: config.debug.recent_requests,
    stallSeconds: config.metrics.stall_seconds,
    realtimeOpen: state.realtime.open,
    startedAt: state.now(),
  })
  state.recorder.add(live.listener)
  state.realtime.listen(live.realtime.listener)
  // The admin instance reads the service's state (draining, in flight, live figures) as it changes.
  const service: Tokentap = Object.assign(state, {
    otel: state.otelMetrics,
    live,
    admin: buildAdmin(localAdminSource(state, live)),
  })
  app.addHook('onClose', async () => {
    // After a drain (server.ts), the last streams' figures wait for one more scrape.
    if (state.draining) await lingerForScrape(state.registry, config.server.drain_linger_seconds, logger)
    await service.admin.close()
  })
  return Object.assign(app, { tokentap: service })
}
