import { hostname } from 'node:os'
import { performance } from 'node:perf_hooks'
import type { AddressInfo } from 'node:net'
import Fastify, { LogController } from 'fastify'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import pino from 'pino'
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import type { Config, RouteConfig } from './config/schema.ts'
import { buildAdmin } from './metrics/admin.ts'
import { LabelLimiter } from './metrics/label-limiter.ts'
import { LlmMetrics } from './metrics/llm-metrics.ts'
import { MetricsRegistry } from './metrics/registry.ts'
import { OtelMetrics } from './metrics/otel.ts'
import { OtelExporter } from './metrics/otel-export.ts'
import { Exchange } from './proxy/exchange.ts'
import type { ExchangeDeps, RouteRuntime } from './proxy/exchange.ts'
import { createAgent, forward, parseUpstream } from './proxy/forward.ts'
import type { Upstream } from './proxy/forward.ts'
import { buildSimulator } from './sim/sim-app.ts'
import { EncodingSelector, DEFAULT_ENCODING_RULES } from './tokens/tokenizer.ts'

/**
 * buildApp(config): the proxy's Fastify instance with every route, plus (as `app.tokentap`) the
 * admin instance, the metrics and the live state. Never listens: src/server.ts does.
 */

export interface Tokentap {
  readonly config: Config
  readonly admin: FastifyInstance
  readonly metrics: LlmMetrics
  readonly registry: MetricsRegistry
  readonly active: ReadonlySet<Exchange>
  readonly logger: Logger
  /** The OTLP exporter, when `otel.endpoint` is set. */
  readonly otel?: OtelExporter
  /** Set by graceful shutdown: /readyz answers 503 from then on. */
  draining: boolean
}

declare module 'fastify' {
  interface FastifyInstance {
    tokentap: Tokentap
  }
}

export interface BuildOptions {
  /** A pino logger to use (tests pass a silent or capturing one). */
  readonly logger?: Logger
  /** The upstream dispatcher (default: a pooled undici Agent with the configured timeouts). */
  readonly dispatcher?: Dispatcher
}

const METHODS = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'] as const

export function createLogger(config: Config): Logger {
  return pino({
    level: config.log.level,
    base: undefined,
    // Belt and braces: tokentap never logs request headers, but should anything carry them
    // (an error with a request attached), credentials are cut out.
    redact: {
      paths: ['req.headers.authorization', 'req.headers["x-api-key"]', 'req.headers["api-key"]', 'req.headers["x-goog-api-key"]', 'req.headers["proxy-authorization"]', 'req.headers.cookie', 'res.headers["set-cookie"]', 'headers.authorization', 'headers["x-api-key"]', 'headers.cookie'],
      censor: '[REDACTED]',
    },
  })
}

export async function buildApp(config: Config, options: BuildOptions = {}): Promise<FastifyInstance> {
  const logger = options.logger ?? createLogger(config)
  const app: FastifyInstance = Fastify({
    loggerInstance: logger,
    // tokentap writes its own line per request (exchange.ts); Fastify's would double it.
    logController: new LogController({ disableRequestLogging: true }),
    // The proxy reads raw URLs itself; never reject a long path the upstream would take.
    routerOptions: { maxParamLength: 65_536, ignoreDuplicateSlashes: false },
    bodyLimit: config.server.body_limit_bytes,
    return503OnClosing: true,
    // close() ends idle keep-alive connections and lets requests in flight finish (graceful drain).
    forceCloseConnections: 'idle',
  }) as unknown as FastifyInstance

  const registry = new MetricsRegistry({ processMetrics: config.metrics.process_metrics })
  const active = new Set<Exchange>()
  const models = new LabelLimiter(config.limits.max_models_per_route)
  const metrics = new LlmMetrics(config.metrics.buckets, (add) => {
    for (const ex of active) add([ex.provider, models.value(ex.route.label, ex.requestModel), ex.route.label], 1)
  }, { stallSeconds: config.metrics.stall_seconds, exemplars: config.metrics.exemplars })
  for (const m of metrics.all()) registry.register(m)
  const otelMetrics = config.otel.endpoint === undefined ? undefined : new OtelMetrics()
  const otel = otelMetrics === undefined
    ? undefined
    : new OtelExporter(otelMetrics, { ...config.otel, endpoint: config.otel.endpoint as string }, logger, [
        { key: 'service.name', value: { stringValue: process.env.OTEL_SERVICE_NAME ?? 'tokentap' } },
        { key: 'service.instance.id', value: { stringValue: `${hostname()}:${process.pid}` } },
      ], '')
  otel?.start()

  const dispatcher = options.dispatcher ?? createAgent(config.upstream)
  const deps: ExchangeDeps = {
    metrics,
    models,
    encodings: new EncodingSelector([...config.tokenizer.models, ...DEFAULT_ENCODING_RULES], config.tokenizer.default),
    logger,
    maxEventBytes: config.limits.max_event_bytes,
    active,
    otel: otelMetrics,
  }

  const state: Tokentap = { config, admin: undefined as unknown as FastifyInstance, metrics, registry, active, logger, otel, draining: false }
  const admin = buildAdmin(state)
  ;(state as { admin: FastifyInstance }).admin = admin
  app.decorate('tokentap', state)

  const sims: FastifyInstance[] = []
  let nextId = 0
  for (const route of config.routes) {
    const runtime: RouteRuntime = { label: route.name ?? route.prefix, prefix: route.prefix, provider: route.provider, slo: route.slo }
    let upstream: Upstream | undefined = route.upstream === undefined ? undefined : parseUpstream(route.upstream)
    if (route.simulator !== undefined) {
      // The simulated model is a real HTTP server on loopback, so its traffic takes the same path as any upstream's.
      const sim = buildSimulator(route.simulator)
      sims.push(sim)
      app.addHook('onReady', async () => {
        await sim.listen({ host: '127.0.0.1', port: 0 })
        upstream = parseUpstream(`http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`)
      })
    }
    const onRequest = (request: FastifyRequest, reply: FastifyReply, done: () => void): void => {
      const tReq = performance.now()
      reply.hijack()
      const req = request.raw
      const url = req.url ?? '/'
      const rest = url.slice(route.prefix === '/' ? 0 : route.prefix.length)
      const pathAndQuery = rest.length === 0 || rest[0] === '?' ? `/${rest}` : rest
      const q = pathAndQuery.indexOf('?')
      const path = q < 0 ? pathAndQuery : pathAndQuery.slice(0, q)
      const idHeader = req.headers['x-request-id']
      const fromClient = typeof idHeader === 'string' && idHeader.length > 0 && idHeader.length <= 200
      const id = fromClient ? idHeader : `tt-${process.pid.toString(36)}-${(nextId++).toString(36)}`
      const ex = new Exchange(deps, runtime, id, req.method ?? 'GET', path, tReq, !fromClient)
      forward(ex, req, reply.raw, { dispatcher, upstream: upstream as Upstream, config, pathAndQuery, injectUsage: route.inject_usage })
      done()
    }
    registerRoute(app, route, onRequest)
  }

  app.addHook('onClose', async () => {
    await Promise.all(sims.map((s) => s.close()))
    await admin.close()
    await otel?.shutdown()
    if (options.dispatcher === undefined) await dispatcher.close()
  })
  return app
}

function registerRoute(app: FastifyInstance, route: RouteConfig, onRequest: (request: FastifyRequest, reply: FastifyReply, done: () => void) => void): void {
  const noop = async (): Promise<void> => {}
  const base = route.prefix === '/' ? '' : route.prefix
  for (const url of base === '' ? ['/', '/*'] : [base, `${base}/*`]) {
    app.route({ method: [...METHODS], url, onRequest, handler: noop, exposeHeadRoute: false })
  }
}
