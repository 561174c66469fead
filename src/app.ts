import type { IncomingMessage, ServerResponse } from 'node:http'
import { hostname } from 'node:os'
import { performance } from 'node:perf_hooks'
import type { AddressInfo } from 'node:net'
import Fastify, { LogController } from 'fastify'
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
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
import { forward, parseUpstream, sendError } from './proxy/forward.ts'
import { UpstreamDispatchers } from './proxy/upstream-dispatcher.ts'
import { createListener } from './listener-tls.ts'
import { TokentapError } from './errors.ts'
import { matchRoute, PROXY_METHODS, rawPrefixEnd } from './proxy/route-match.ts'
import type { ProxyRoute } from './proxy/route-match.ts'
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

/**
 * The request log goes out in batches, off the request path: lines gather until 8 KiB or 50 ms,
 * then leave in one asynchronous write (a line per syscall cost as much as the rest of a short
 * request). Past 16 MiB waiting on a slow stdout, lines are dropped rather than grow memory.
 * pino writes out what is left when the process exits.
 */
const LOG_BATCH_BYTES = 8192
const LOG_FLUSH_MS = 50
const LOG_BUFFER_BYTES = 16 * 1024 * 1024

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
  }, pino.destination({ dest: 1, sync: false, minLength: LOG_BATCH_BYTES, periodicFlush: LOG_FLUSH_MS, maxLength: LOG_BUFFER_BYTES }))
}

export async function buildApp(config: Config, options: BuildOptions = {}): Promise<FastifyInstance> {
  const logger = options.logger ?? createLogger(config)
  const proxyRoutes: ProxyRoute[] = []
  let closing = false
  const app: FastifyInstance = Fastify({
    // Proxied requests skip Fastify's router, request/reply objects and hooks (per-request CPU
    // that a short stream pays in full): the listener hands them to the proxy at once, with
    // t_req taken as the headers are parsed. Fastify keeps everything else: unmatched paths,
    // odd request targets, and the 503 answers while closing (its routes for the same prefixes
    // remain registered below).
    serverFactory: (handler, opts: FastifyServerOptions) => {
      const server = createListener(config.server.tls, 'server.tls', (req, res) => {
        const tReq = performance.now()
        const route = closing ? undefined : matchRoute(proxyRoutes, req.method, req.url)
        if (route === undefined) {
          handler(req, res)
          return
        }
        try {
          route.handle(req, res, tReq)
        } catch (err) {
          // A bug must cost one request, never the process (Fastify's hooks gave the same guarantee).
          logger.error({ err }, 'proxy handler failed')
          sendError(res, new TokentapError('TOKENTAP_ERR_INTERNAL', (err as Error).message))
        }
      })
      // What Fastify sets on a server it creates itself.
      server.keepAliveTimeout = opts.keepAliveTimeout as number
      server.requestTimeout = opts.requestTimeout as number
      server.setTimeout(opts.connectionTimeout as number)
      return server
    },
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

  const upstreams = options.dispatcher === undefined ? new UpstreamDispatchers(config.upstream) : undefined
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
  for (const [index, route] of config.routes.entries()) {
    const dispatcher = options.dispatcher ?? (upstreams as UpstreamDispatchers).forRoute(route, index)
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
    const base = route.prefix === '/' ? '' : route.prefix
    const handle = (req: IncomingMessage, res: ServerResponse, tReq: number, restAt = base.length): void => {
      const url = req.url ?? '/'
      const rest = url.slice(restAt)
      const pathAndQuery = rest.length === 0 || rest[0] === '?' ? `/${rest}` : rest
      const q = pathAndQuery.indexOf('?')
      const path = q < 0 ? pathAndQuery : pathAndQuery.slice(0, q)
      const idHeader = req.headers['x-request-id']
      const fromClient = typeof idHeader === 'string' && idHeader.length > 0 && idHeader.length <= 200
      const id = fromClient ? idHeader : `tt-${process.pid.toString(36)}-${(nextId++).toString(36)}`
      const ex = new Exchange(deps, runtime, id, req.method ?? 'GET', path, tReq, !fromClient)
      forward(ex, req, res, { dispatcher, upstream: upstream as Upstream, config, pathAndQuery, injectUsage: route.inject_usage })
    }
    proxyRoutes.push({ base, handle })
    const onRequest = (request: FastifyRequest, reply: FastifyReply, done: () => void): void => {
      const tReq = performance.now()
      reply.hijack()
      // Fastify matched the decoded path: find where the prefix ends in the raw one.
      handle(request.raw, reply.raw, tReq, rawPrefixEnd(request.raw.url ?? '/', base))
      done()
    }
    registerRoute(app, route, onRequest)
  }

  // Longest prefix first, as Fastify's router prefers the more specific route.
  proxyRoutes.sort((a, b) => b.base.length - a.base.length)
  // From here on requests go through Fastify, which answers 503 to any that still arrive.
  app.addHook('preClose', async () => {
    closing = true
  })

  app.addHook('onClose', async () => {
    await Promise.all(sims.map((s) => s.close()))
    await admin.close()
    await otel?.shutdown()
    await upstreams?.close()
  })
  return app
}

function registerRoute(app: FastifyInstance, route: RouteConfig, onRequest: (request: FastifyRequest, reply: FastifyReply, done: () => void) => void): void {
  const noop = async (): Promise<void> => {}
  const base = route.prefix === '/' ? '' : route.prefix
  for (const url of base === '' ? ['/', '/*'] : [base, `${base}/*`]) {
    app.route({ method: [...PROXY_METHODS], url, onRequest, handler: noop, exposeHeadRoute: false })
  }
}
