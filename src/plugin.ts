import { CostMetrics } from './metrics/llm/cost-metrics.ts'
import { pricesOf } from './cost/price-table.ts'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import { monotonicNow } from './clock.ts'
import { validateConfig } from './config/load-config.ts'
import type { Config, RouteConfig } from './config/schema.ts'
import { TokentapError } from './errors.ts'
import { nativeOptions } from './metrics/prometheus/histogram.ts'
import { FOLD_MESSAGE } from './record/label-fold.ts'
import { LlmMetrics } from './metrics/llm/llm-metrics.ts'
import { MetricsRegistry } from './metrics/prometheus/registry.ts'
import { TenantResolver } from './record/tenant.ts'
import type { OtelMetrics } from './metrics/otel/otel-metrics.ts'
import { otelEnabled, traceSampling, tracesConfig } from './metrics/otel/config.ts'
import { loadOtel } from './metrics/otel/load.ts'
import type { ServerOf } from './metrics/otel/request-span.ts'
import type { OtelTraces } from './metrics/otel/traces.ts'
import { TraceIdSource } from './record/trace-context.ts'
import { appHeadersOf } from './proxy/app-headers.ts'
import { sendError } from './proxy/error-answer.ts'
import type { Exchange, ExchangeDeps } from './proxy/exchange.ts'
import { FinishQueue } from './proxy/finish-queue.ts'
import { forward } from './proxy/forward.ts'
import { ExchangeOpener, proxyRoute } from './proxy/open-exchange.ts'
import { Recorder } from './record/recorder.ts'
import type { Sink } from './record/recorder.ts'
import { requestLog } from './record/request-log.ts'
import { RequestIds } from './proxy/request-id.ts'
import { originForm } from './proxy/request-target.ts'
import { PROXY_METHODS } from './proxy/route-path.ts'
import { RealtimeSessions } from './realtime/realtime.ts'
import { registerRealtimeMetrics } from './metrics/llm/realtime-metrics.ts'
import { installUpgradeListener, pendingUpgrade } from './realtime/upgrade-listener.ts'
import { RecordPolicy } from './record/observations.ts'
import { parseUpstream } from './proxy/upstream.ts'
import { UpstreamDispatchers } from './proxy/upstream-dispatcher.ts'
import type { Upstream } from './proxy/upstream.ts'
import { buildSimulator } from './sim/sim-app.ts'
import { DEFAULT_ENCODING_RULES, EncodingSelector, warmTokenizers } from './tokens/tokenizer.ts'
import { isSuccess } from './http-status.ts'

/**
 * The Fastify plugin: registers the proxy routes on the caller's instance, behind the caller's hooks (API keys, rate
 * limits, CORS); each handler hijacks the reply and forwards with undici, and the state is decorated as `app.tokentap`.
 */

/** A config part as a caller writes it: any key at any depth may be left to the schema's default. */
type ConfigInput<T> = T extends readonly (infer U)[]
  ? readonly ConfigInput<U>[]
  : T extends object
    ? { readonly [K in keyof T]?: ConfigInput<T[K]> }
    : T

/** The config parts the plugin takes, validated (and completed with defaults) by the same schema as the config file. */
export type TokentapConfigOptions = ConfigInput<
  Pick<Config, 'metrics' | 'limits' | 'upstream' | 'tokenizer' | 'otel' | 'server'>
> & {
  /** The proxy routes (required unless `config` is given). */
  readonly routes?: readonly ConfigInput<RouteConfig>[]
}

export interface TokentapOptions extends TokentapConfigOptions {
  /** A config already validated (what src/app.ts passes); the other config keys are then ignored. */
  readonly config?: Config
  /** The upstream dispatcher (default: a pooled undici Agent with the configured timeouts). */
  readonly dispatcher?: Dispatcher
  /** The monotonic clock in ms (default: src/clock.ts); tests replay streams on virtual time. */
  readonly now?: () => number
  /** The logger for the request lines (default: the Fastify instance's). */
  readonly logger?: Logger
  /**
   * @internal Whether this process logs the label-set budget's first fold (default true); a cluster
   * worker's is false: the primary logs it once for the group (label-fold.ts).
   */
  readonly warnOnFold?: boolean
}

/** What the plugin decorates the instance with (`app.tokentap`). */
export interface TokentapState {
  readonly config: Config
  readonly metrics: LlmMetrics
  readonly registry: MetricsRegistry
  readonly active: ReadonlySet<Exchange>
  readonly recorder: Recorder
  readonly logger: Logger
  /** OpenTelemetry GenAI metrics and their OTLP export, when `otel.endpoint` (or an OTLP endpoint variable) is set. */
  readonly otelMetrics?: OtelMetrics
  /** The span export (`otel.traces`), when on. */
  readonly otelTraces?: OtelTraces
  /** How requests become exchanges (the @fastify/http-proxy helper opens its own through it). */
  readonly opener: ExchangeOpener
  /** The monotonic clock (ms) every time of this instance comes from. */
  readonly now: () => number
  /** WebSocket sessions (OpenAI Realtime, Gemini Live) relayed and measured on the routes. */
  readonly realtime: RealtimeSessions
  /** Set by graceful shutdown: /readyz answers 503 from then on. */
  draining: boolean
}

declare module 'fastify' {
  interface FastifyInstance {
    /** tokentap's measuring state, once the plugin is registered. */
    tokentap: TokentapState
  }
  interface FastifyRequest {
    /** t_req (ms, monotonic): when tokentap's route first saw the request (NaN when the app's hooks answered before). */
    tokentapStart: number
    /** tokentap's handler took the request (else the app's hooks answered it: error_type `policy`). */
    tokentapHandled: boolean
  }
}

function validatedConfig(options: TokentapOptions): Config {
  if (options.config !== undefined) return options.config
  const { config: _c, dispatcher: _d, now: _n, logger: _l, ...parts } = options
  if (parts.routes !== undefined && parts.routes.length > 0) return validateConfig(parts)
  // A config file must name a route; the plugin may have none (an app that measures only @fastify/http-proxy routes).
  const validated = validateConfig({ ...parts, routes: [{ prefix: '/', upstream: 'http://127.0.0.1' }] })
  return Object.freeze({ ...validated, routes: Object.freeze([]) })
}

const tokentapPlugin: FastifyPluginAsync<TokentapOptions> = async (app, options) => {
  const config = validatedConfig(options)
  // At registration, before any listener opens (server, each cluster worker, an embedding app).
  const now = options.now ?? monotonicNow
  warmTokenizers(now)
  const logger = options.logger ?? (app.log as unknown as Logger)
  const native = nativeOptions(config.metrics.native_histograms)
  const registry = new MetricsRegistry({
    processMetrics: config.metrics.process_metrics,
    protobuf: native !== undefined,
  })
  const active = new Set<Exchange>()
  const otelOn = otelEnabled(config.otel)
  const tenant = config.metrics.tenant
  const traces = tracesConfig(config.otel)
  const prices = config.pricing === undefined ? undefined : pricesOf(config.pricing)
  const policy = new RecordPolicy({
    maxModelsPerRoute: config.limits.max_models_per_route,
    maxLabelSets: config.limits.max_label_sets,
    onFirstFold:
      options.warnOnFold === false
        ? undefined
        : () => logger.warn({ max_label_sets: config.limits.max_label_sets }, FOLD_MESSAGE),
    lengthBandLabel: config.metrics.length_band_label,
    inputLengthBandLabel: config.metrics.input_length_band_label,
    genAi: otelOn,
    tenant: tenant !== undefined,
    traces: traces === undefined ? undefined : traceSampling(traces),
    prices,
  })
  const metrics = new LlmMetrics(
    config.metrics.buckets,
    (add) => {
      for (const ex of active) add(policy.inFlightValues(ex.provider, ex.route.label, ex.requestModel, ex.tenant), 1)
    },
    {
      stallSeconds: config.metrics.stall_seconds,
      exemplars: config.metrics.exemplars,
      labelNames: policy.labels.names,
      bandedLabelNames: policy.labels.bandedNames,
      inputBandedLabelNames: policy.labels.inputBandedNames,
      native,
    },
  )
  for (const m of metrics.all()) registry.register(m)
  // `server.address` of a route's spans: its upstream (a simulator's once it listens).
  const servers = new Map<string, ServerOf>()
  const otel = await loadOtel({
    config: config.otel,
    logger,
    metrics: otelOn,
    traces,
    stallSeconds: config.metrics.stall_seconds,
    now,
    serverOf: (route) => servers.get(route),
  })
  const { metrics: otelMetrics, traces: otelTraces } = otel
  // Closing sends a last export and the last spans (onClose runs once requests in flight have been recorded).
  if (otelMetrics !== undefined) app.addHook('onClose', async () => otelMetrics.shutdown())
  if (otelTraces !== undefined) app.addHook('onClose', async () => otelTraces.shutdown())
  // The sinks, each a map of Observations; the live views join after the log line (app.ts).
  const sinks: Sink[] = [(o) => metrics.record(o)]
  if (otelMetrics !== undefined) sinks.push((o) => otelMetrics.record(o))
  if (otelTraces !== undefined) sinks.push((o) => otelTraces.record(o))
  if (prices !== undefined) {
    const cost = new CostMetrics(prices.currency, policy.labels.names, native)
    for (const m of cost.all()) registry.register(m)
    sinks.push((o) => cost.record(o))
  }
  sinks.push(requestLog(logger))
  const recorder = new Recorder(policy, sinks, (err, who) =>
    logger.error({ err, route: who.route.label }, 'recording a request failed'),
  )
  const deps: ExchangeDeps = {
    encodings: new EncodingSelector([...config.tokenizer.models, ...DEFAULT_ENCODING_RULES], config.tokenizer.default),
    now,
    maxEventBytes: config.limits.max_event_bytes,
    stallSeconds: config.metrics.stall_seconds,
    active,
    record: recorder.record,
    onRecordError: recorder.onRecordError,
  }
  const finishing = new FinishQueue()
  const opener = new ExchangeOpener(
    deps,
    new RequestIds(),
    finishing,
    now,
    tenant === undefined ? undefined : new TenantResolver(tenant),
    traces === undefined ? undefined : new TraceIdSource(),
  )
  const realtime = new RealtimeSessions({ config, logger, encodings: deps.encodings, policy, now })
  registerRealtimeMetrics(realtime, registry, config.metrics.buckets, policy.labels.names, native)
  if (otelTraces !== undefined) realtime.listen(otelTraces.realtime)
  const state: TokentapState = {
    config,
    metrics,
    registry,
    active,
    recorder,
    logger,
    otelMetrics,
    otelTraces,
    opener,
    now,
    realtime,
    draining: false,
  }
  app.decorate('tokentap', state)
  // WebSocket upgrades go through the router and the caller's hooks like any request (upgrade-listener.ts).
  installUpgradeListener(app, logger)
  app.addHook('preClose', async () => realtime.drain(config.server.drain_seconds * 1000))
  app.addHook('onClose', async () => realtime.drained())

  // One shared pool, plus one per route with its own `tls:` or `proxy:` (upstream-dispatcher.ts).
  const upstreams = options.dispatcher === undefined ? new UpstreamDispatchers(config.upstream) : undefined
  if (upstreams !== undefined) app.addHook('onClose', async () => upstreams.close())

  // The proxy routes get a context of their own, so their body parser (none: the body streams upstream) leaves the
  // caller's other routes alone.
  await app.register(async (proxy) => {
    proxy.removeAllContentTypeParsers()
    const unread = (_request: FastifyRequest, _payload: unknown, done: (err: null) => void): void => done(null)
    // Also under a match-everything pattern: Fastify caches pattern matches per content-type but looks the catch-all up
    // on every request; '*' still takes a request without a content-type.
    proxy.addContentTypeParser(/^/, unread)
    proxy.addContentTypeParser('*', unread)
    proxy.decorateRequest('tokentapStart', Number.NaN)
    proxy.decorateRequest('tokentapHandled', false)
    for (const [index, route] of config.routes.entries())
      registerRoute(proxy, route, options.dispatcher ?? (upstreams as UpstreamDispatchers).forRoute(route, index))
  })

  function registerRoute(proxy: FastifyInstance, route: RouteConfig, dispatcher: Dispatcher): void {
    const proxied = proxyRoute(route)
    let upstream: Upstream | undefined = route.upstream === undefined ? undefined : parseUpstream(route.upstream)
    const known = (u: Upstream): void => void servers.set(proxied.runtime.label, serverOf(u))
    if (upstream !== undefined) known(upstream)
    if (route.simulator !== undefined) {
      // The simulated model is a real HTTP server on loopback, so its traffic takes the same path as any upstream's.
      const sim = buildSimulator(route.simulator)
      app.addHook('onReady', async () => {
        await sim.listen({ host: '127.0.0.1', port: 0 })
        upstream = parseUpstream(`http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`)
        known(upstream)
      })
      app.addHook('onClose', async () => sim.close())
    }
    const base = proxied.base
    const onRequest = (request: FastifyRequest, _reply: FastifyReply, done: () => void): void => {
      request.tokentapStart = now()
      done()
    }
    // The app's hooks answered (rate limit, API-key check): still a request the route received, counted with error_type
    // `policy`. onResponse runs on the response's finish.
    const onResponse = (request: FastifyRequest, reply: FastifyReply, done: () => void): void => {
      if (!request.tokentapHandled && pendingUpgrade(request.raw) === undefined) appAnswered(request, reply)
      done()
    }
    const appAnswered = (request: FastifyRequest, reply: FastifyReply): void => {
      const url = originForm(request.raw.url ?? '/')
      if (url instanceof TokentapError) return
      // A hook before the route's own onRequest answered: t_req from Fastify's own elapsed time.
      const tReq = Number.isNaN(request.tokentapStart) ? now() - reply.elapsedTime : request.tokentapStart
      const { ex } = opener.open(proxied, request.raw, url, tReq)
      const status = reply.statusCode
      const length = Number(reply.getHeader('content-length'))
      ex.answered(status, Number.isSafeInteger(length) && length > 0 ? length : 0)
      if (!isSuccess(status)) ex.fail('TOKENTAP_ERR_APP_ANSWERED', String(status))
      opener.finish(ex, false)
    }
    const handler = (request: FastifyRequest, reply: FastifyReply): void => {
      request.tokentapHandled = true
      // Fastify will not write the app's headers (CORS, rate limits) on a hijacked reply, so the proxy does (app-headers.ts).
      const appHeaders = appHeadersOf(reply.getHeaders())
      reply.hijack()
      const req = request.raw
      const res = reply.raw
      try {
        // Absolute-form targets reduced to their path, fragments cut: client text never lands upstream (request-target.ts).
        const url = originForm(req.url)
        if (url instanceof TokentapError) {
          sendError(res, url, appHeaders)
          return
        }
        // Two Host fields, or a path that would leave the route's base path upstream: 400, WebSocket upgrades included.
        const refused = opener.confine(proxied, req, url)
        if (refused !== undefined) {
          sendError(res, refused)
          return
        }
        const pending = pendingUpgrade(req)
        if (pending !== undefined) {
          const { target, id, tenant, trace } = opener.identify(proxied, req, url)
          realtime.pass(req, pending, {
            route: proxied.runtime,
            id,
            tenant,
            tReq: request.tokentapStart,
            target,
            dispatcher,
            upstream: upstream as Upstream,
            trace,
          })
          return
        }
        const { ex, target } = opener.open(proxied, req, url, request.tokentapStart)
        forward(ex, req, res, {
          dispatcher,
          upstream: upstream as Upstream,
          config,
          pathAndQuery: target.pathAndQuery,
          injectUsage: route.inject_usage,
          opener,
          appHeaders,
        })
      } catch (err) {
        // A bug must cost one request, never the process.
        logger.error({ err }, 'proxy handler failed')
        sendError(res, new TokentapError('TOKENTAP_ERR_INTERNAL', (err as Error).message), appHeaders)
      }
    }
    for (const url of base === '' ? ['/', '/*'] : [base, `${base}/*`]) {
      proxy.route({ method: [...PROXY_METHODS], url, onRequest, onResponse, handler, exposeHeadRoute: false })
    }
  }
}

/** `server.address` and `server.port` of an upstream (its URL's, the scheme's default port when it names none). */
function serverOf(u: Upstream): ServerOf {
  const url = new URL(u.origin)
  return {
    address: url.hostname.replace(/^\[|\]$/g, ''),
    port: url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port),
  }
}

/** The tokentap Fastify plugin (wrapped with fastify-plugin, so `app.tokentap` is visible to the caller). */
const tokentap = fp(tokentapPlugin, { fastify: '5.x', name: 'tokentap' })
export default tokentap
