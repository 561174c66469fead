import type { Logger } from 'pino'
import { providerForPath, selectParser } from '../parsers/select-parser.ts'
import { ContentKind } from '../parsers/types.ts'
import type { ContentEvent, StreamSummary } from '../parsers/types.ts'
import { ChunkLog, MarkKind } from '../timing/chunk-log.ts'
import { itlQuantiles, reconcileTokens, summarize, totalTokens } from '../timing/request-timing.ts'
import type { Timing } from '../timing/request-timing.ts'
import { Outcome, TokenSource } from '../metrics/llm-metrics.ts'
import type { LlmMetrics } from '../metrics/llm-metrics.ts'
import type { LabelLimiter } from '../metrics/label-limiter.ts'
import type { RouteSlo } from '../metrics/slo.ts'
import type { OtelMetrics } from '../metrics/otel.ts'
import { UNKNOWN } from '../metrics/label-limiter.ts'
import type { EncodingSelector, TokenCount } from '../tokens/tokenizer.ts'
import { Tap } from './tap.ts'
import type { BodyWatch } from './request-body.ts'

/**
 * One request's measuring state, from request headers to the response's close: which route,
 * provider and model, the tap and its chunk log, the outcome. `finish()` runs exactly once
 * and records the metrics and the log line. Knows no sockets; `forward.ts` drives it.
 */

export interface RouteRuntime {
  /** The `route` label: the route's name, else its prefix. */
  readonly label: string
  readonly prefix: string
  /** Configured provider, or `auto`. */
  readonly provider: string
  /** The route's latency SLO, when it has one. */
  readonly slo?: RouteSlo
}

export interface ExchangeDeps {
  readonly metrics: LlmMetrics
  readonly models: LabelLimiter
  readonly encodings: EncodingSelector
  readonly logger: Logger
  readonly maxEventBytes: number
  /** Requests in flight (for the gauge and live views). */
  readonly active: Set<Exchange>
  /** OpenTelemetry GenAI metrics, when `otel.endpoint` is set. */
  readonly otel?: OtelMetrics
}

const KIND: Record<ContentEvent['kind'], MarkKind> = {
  [ContentKind.text]: MarkKind.text,
  [ContentKind.reasoning]: MarkKind.reasoning,
  [ContentKind.tool]: MarkKind.tool,
}

const ms = (seconds: number | undefined): number | undefined => (seconds === undefined ? undefined : Math.round(seconds * 1e6) / 1e3)

export class Exchange {
  /** The client's x-request-id, else the upstream response's, else generated (see `idGenerated`). */
  id: string
  readonly route: RouteRuntime
  readonly tReq: number
  readonly method: string
  /** Path after the route prefix, without the query. */
  readonly path: string
  readonly chunks = new ChunkLog()
  readonly #deps: ExchangeDeps

  /** The request body as it streams upstream (size, model), when there is one. */
  body: BodyWatch | undefined
  statusCode = 0
  tHeaders: number | undefined
  bytesOut = 0
  /** The upstream or the proxy failed the request (connect, timeout, reset, limit). */
  failure: string | undefined
  #provider: string
  readonly #pathModel: string | undefined
  /** The path is a provider's completion API (its answer should be measurable). */
  readonly #ownsPath: boolean
  /** Why a successful answer on such a path could not be read at all (no parser for its content-type). */
  #unreadable: string | undefined
  #tap: Tap | undefined
  #counter: TokenCount | undefined
  #finished = false
  #injected = false
  /** The id was made up by the proxy, so the upstream's x-request-id may replace it. */
  readonly #idGenerated: boolean

  constructor(deps: ExchangeDeps, route: RouteRuntime, id: string, method: string, path: string, tReq: number, idGenerated = false) {
    this.#deps = deps
    this.route = route
    this.id = id
    this.#idGenerated = idGenerated
    this.method = method
    this.path = path
    this.tReq = tReq
    const spec = providerForPath(route.provider, path)
    this.#provider = spec?.name ?? (route.provider === 'auto' ? UNKNOWN : route.provider)
    this.#pathModel = spec?.modelFromPath?.(path)
    this.#ownsPath = spec?.ownsPath(path) === true
    deps.active.add(this)
  }

  get provider(): string {
    return this.#provider
  }

  /** The request's model: its body's `model`, else the path's (Gemini, Vertex, Bedrock, Azure deployments). */
  get requestModel(): string | undefined {
    return this.body?.model ?? this.#pathModel
  }

  readonly #countTokens = (text: string): number => {
    this.#counter ??= this.#deps.encodings.counterFor(this.requestModel)
    return this.#counter(text)
  }

  readonly #onContent = (event: ContentEvent, at: number): void => {
    this.chunks.add(at, event.tokens, KIND[event.kind], event.exact)
  }

  /** Upstream response headers arrived: choose the parser. `requestId`: the response's x-request-id. */
  responseStarted(statusCode: number, contentType: string | undefined, contentEncoding: string | undefined, at: number, requestId?: string): void {
    this.statusCode = statusCode
    this.tHeaders = at
    // The provider's own id (OpenAI's req_…) is the one its support can look up.
    if (this.#idGenerated && requestId !== undefined && requestId.length > 0 && requestId.length <= 200) this.id = requestId
    if (contentType === undefined || statusCode === 204 || statusCode === 304 || this.method === 'HEAD') return
    const selection = selectParser(this.route.provider, this.path, contentType, {
      path: this.path,
      contentType,
      maxEventBytes: this.#deps.maxEventBytes,
      countTokens: this.#countTokens,
    })
    this.#provider = selection.provider
    if (selection.parser !== undefined) this.#tap = new Tap(selection.parser, contentEncoding, this.#onContent)
    else if (this.#ownsPath && statusCode >= 200 && statusCode < 300) this.#unreadable = `no parser for content-type '${contentType.slice(0, 100)}'`
  }

  /** `stream_options.include_usage` was added to this request (the route's `inject_usage`). */
  usageInjected(): void {
    // Counted when the request ends, with the same provider/model/route labels as its other series.
    this.#injected = true
  }

  /** A read from the upstream, already written to the client. */
  data(chunk: Buffer, at: number): void {
    this.bytesOut += chunk.length
    this.#tap?.push(chunk, at)
  }

  /**
   * The response is over: `clientGone` when the client closed before the last byte was
   * written. Records everything once.
   */
  finish(tEnd: number, clientGone: boolean): void {
    if (this.#finished) return
    this.#finished = true
    const summary = this.#tap?.end() ?? {}
    if (summary instanceof Promise) void summary.then((s) => this.#done(s, tEnd, clientGone))
    else this.#done(summary, tEnd, clientGone)
  }

  #done(summary: StreamSummary, tEnd: number, clientGone: boolean): void {
    const deps = this.#deps
    deps.active.delete(this)
    try {
      this.#record(summary, tEnd, clientGone)
    } catch (err) {
      // Measuring must never take the proxy down.
      deps.logger.error({ err, route: this.route.label }, 'recording a request failed')
    }
  }

  #record(summary: StreamSummary, tEnd: number, clientGone: boolean): void {
    const deps = this.#deps
    const outcome: Outcome = clientGone
      ? Outcome.cancelled
      : this.failure !== undefined || this.statusCode < 200 || this.statusCode >= 300 || summary.error !== undefined
        ? Outcome.error
        : Outcome.ok

    const usage = summary.usage
    const chunks = this.chunks
    let source: TokenSource = TokenSource.estimate
    let estimateRatio: number | undefined
    if (usage?.output !== undefined) {
      source = TokenSource.usage
      if (!chunks.allExact && outcome !== Outcome.cancelled) {
        // Reasoning the provider counted but did not stream is not in the chunks.
        let streamedReasoning = false
        for (let i = 0; i < chunks.count && !streamedReasoning; i++) streamedReasoning = chunks.kind(i) === MarkKind.reasoning
        const visible = usage.output - (usage.reasoning !== undefined && !streamedReasoning ? usage.reasoning : 0)
        // The tokenizer's estimate, taken before reconciling replaces it with the provider's count.
        if (outcome === Outcome.ok && chunks.count > 0 && visible > 0) estimateRatio = totalTokens(chunks) / visible
        reconcileTokens(chunks, visible)
      }
    } else if (chunks.count > 0 && chunks.allExact) {
      source = TokenSource.stream
    }
    const timing = summarize(this.tReq, tEnd, chunks)
    const outputTokens = usage?.output ?? timing.tokens
    const model = deps.models.value(this.route.label, this.requestModel ?? summary.model)
    const labels = { provider: this.#provider, model, route: this.route.label }
    const statusCode = this.statusCode === 0 ? (outcome === Outcome.cancelled ? 499 : 502) : this.statusCode
    const headersSeconds = this.tHeaders === undefined ? undefined : Math.max(0, this.tHeaders - this.tReq) / 1000
    deps.metrics.record({ labels, outcome, statusCode, timing, chunks, outputTokens, outputSource: source, inputTokens: usage?.input, headersSeconds, requestId: this.id, slo: this.route.slo, estimateRatio })
    deps.otel?.record({
      labels,
      method: this.method,
      path: this.path,
      responseModel: summary.model === undefined ? undefined : deps.models.value(`${this.route.label}\u0000response`, summary.model),
      errorType: outcome === Outcome.ok ? undefined : outcome === Outcome.cancelled ? 'cancelled' : this.failure ?? (statusCode < 200 || statusCode >= 300 ? String(statusCode) : 'provider_error'),
      outcome,
      timing,
      chunks,
      outputTokens: usage?.output ?? (timing.chunks > 0 ? timing.tokens : undefined),
      inputTokens: usage?.input,
    })
    if (this.#injected) deps.metrics.usageInjected(labels)
    const parseError = summary.parseError ?? this.#unreadable
    if (parseError !== undefined) {
      deps.metrics.parseError(labels)
      deps.logger.warn({ request_id: this.id, route: this.route.label, provider: this.#provider, reason: parseError }, 'stream not measured: parser gave up (bytes passed through unchanged)')
    }
    this.#log(labels, outcome, statusCode, timing, outputTokens, source, summary)
  }

  #log(labels: { provider: string; model: string; route: string }, outcome: Outcome, status: number, timing: Timing, outputTokens: number, source: TokenSource, summary: StreamSummary): void {
    const logger = this.#deps.logger
    if (!logger.isLevelEnabled('info')) return
    const [p50, p99] = itlQuantiles(this.chunks, [0.5, 0.99])
    logger.info(
      {
        request_id: this.id,
        route: labels.route,
        provider: labels.provider,
        model: labels.model,
        method: this.method,
        path: this.path.length > 256 ? `${this.path.slice(0, 256)}…` : this.path,
        status,
        outcome,
        error: this.failure ?? summary.error,
        ttft_ms: ms(timing.ttft),
        headers_ms: this.tHeaders === undefined ? undefined : Math.round((this.tHeaders - this.tReq) * 1e3) / 1e3,
        e2e_ms: ms(timing.e2e),
        output_tokens: outputTokens,
        output_source: source,
        input_tokens: summary.usage?.input,
        chunks: timing.chunks,
        streamed_tokens: timing.tokens,
        tpot_ms: ms(timing.tpot),
        itl_p50_ms: ms(p50),
        itl_p99_ms: ms(p99),
        max_gap_ms: ms(timing.maxGap),
        tps: timing.tps === undefined ? undefined : Math.round(timing.tps * 100) / 100,
        bytes_in: this.body?.bytes ?? 0,
        bytes_out: this.bytesOut,
        ...summary.extra,
      },
      'request',
    )
  }
}
