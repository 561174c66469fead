import { providerForPath } from '../parsers/registry.ts'
import type { ReportedTimes } from '../parsers/reported-times.ts'
import { ContentKind } from '../parsers/types.ts'
import type { ContentEvent, StreamSummary } from '../parsers/types.ts'
import { ChunkLog, MarkKind } from '../timing/chunk-log.ts'
import { measure } from '../timing/measurement.ts'
import type { Measurement } from '../timing/measurement.ts'
import type { RouteSlo } from '../timing/slo.ts'
import { ReadBudget } from '../tokens/tokenizer.ts'
import type { EncodingSelector } from '../tokens/tokenizer.ts'
import type { FailureCode } from '../errors.ts'
import { UNKNOWN } from '../record/labels.ts'
import type { RequestFacts } from '../record/observations.ts'
import { MAX_REQUEST_ID_LENGTH } from './request-id.ts'
import { tapResponse } from './tap.ts'
import type { Tap } from './tap.ts'
import { failurePrevails } from './upstream-errors.ts'
import type { BodyWatch } from './request-body.ts'
import type { TraceStart } from './trace-context.ts'
import { isBodiless, isSuccess } from '../http-status.ts'

/**
 * One request's measuring state, from request headers to the response's close: which route,
 * provider and model, the tap and its chunk log, the failure if any. The byte path (forward.ts,
 * client-writer.ts) tells it what happened through intent methods; `finish()` runs once, turns
 * the facts into a `Measurement` (timing/measurement.ts, the one home of that policy) and hands
 * it to `record`. Knows no sockets and reads no clock: every time is given.
 */

export interface RouteRuntime {
  /** The `route` label: the route's name, else its prefix. */
  readonly label: string
  readonly prefix: string
  /** Configured provider, or `auto`. */
  readonly provider: string
  /** The route's latency SLO, when it has one. */
  readonly slo?: RouteSlo
  /** Requests of this route in flight now (kept by the exchanges themselves). */
  inFlight: number
  /** The route's `echo_request_id` and `server_timing` settings. */
  readonly echoRequestId?: boolean
  readonly serverTiming?: boolean
}

export interface ExchangeDeps {
  readonly encodings: EncodingSelector
  /** The clock the counting budget per read runs on (the measuring clock). */
  readonly now: () => number
  readonly maxEventBytes: number
  /** A longer gap between content chunks (seconds) is a stall. */
  readonly stallSeconds: number
  /** Requests in flight (for the gauge and live views). */
  readonly active: Set<Exchange>
  /** Called once per exchange with its measurement. Must not throw (errors are the caller's to log). */
  readonly record: (who: RequestFacts, m: Measurement) => void
  /** Called when recording threw: measuring must never take the proxy down. */
  readonly onRecordError: (err: unknown, who: RequestFacts) => void
}

const KIND: Record<ContentEvent['kind'], MarkKind> = {
  [ContentKind.text]: MarkKind.text,
  [ContentKind.reasoning]: MarkKind.reasoning,
  [ContentKind.tool]: MarkKind.tool,
}

export class Exchange {
  readonly #deps: ExchangeDeps
  readonly #route: RouteRuntime
  readonly #tReq: number
  readonly #method: string
  readonly #path: string
  readonly #chunks = new ChunkLog()
  readonly #concurrency: number
  /** The id was made up by the proxy, so the upstream's x-request-id may replace it. */
  readonly #idGenerated: boolean
  #id: string
  #provider: string
  readonly #pathModel: string | undefined
  /** The path is a provider's completion API (its answer should be measurable). */
  readonly #ownsPath: boolean
  #body: BodyWatch | { readonly model: string | undefined; readonly bytes: number } | undefined
  #statusCode = 0
  #tHeaders: number | undefined
  #tRequestSent: number | undefined
  #bytesOut = 0
  #failure: FailureCode | undefined
  #failureDetail: string | undefined
  /** Why a successful answer on such a path could not be read at all (no parser for its content-type). */
  #unreadable: string | undefined
  #tap: Tap | undefined
  /** The request's tokenizer behind a budget per read: counting never holds the event loop long. */
  #counter: ReadBudget | undefined
  #finished = false
  #injected = false
  /** The parser's summary, once the upstream's body ended (or the response closed). */
  #summary: StreamSummary | Promise<StreamSummary> | undefined
  /** Timings the upstream reported in its response headers (ProviderSpec.headerTimes). */
  #headerTimes: ReportedTimes | undefined
  /** The answer is a stream its parser reads as it comes (not a whole JSON answer read at the end). */
  #streamed = false
  /** ms the response's bytes waited for the client's socket (write returned false → 'drain'), when a writer that measures it writes them. */
  #clientWaitMs: number | undefined
  #firstChunkOverhead: number | undefined
  #contentReadOverhead = 0
  #contentReads = 0
  /** What was recorded, once it was (a cluster worker tells its primary how each request ended). */
  #measured: Measurement | undefined

  /** The `tenant` label value, resolved once from the request's headers (undefined with `metrics.tenant` off). */
  readonly tenant: string | undefined
  /** Its span's ids, set once when the request opened with `otel.traces` on (open-exchange.ts). */
  trace: TraceStart | undefined

  constructor(deps: ExchangeDeps, route: RouteRuntime, id: string, method: string, path: string, tReq: number, idGenerated = false, tenant?: string) {
    this.#deps = deps
    this.tenant = tenant
    this.#route = route
    this.#id = id
    this.#idGenerated = idGenerated
    this.#method = method
    this.#path = path
    this.#tReq = tReq
    const spec = providerForPath(route.provider, path)
    this.#provider = spec?.name ?? (route.provider === 'auto' ? UNKNOWN : route.provider)
    this.#pathModel = spec?.modelFromPath?.(path)
    this.#ownsPath = spec?.ownsPath(path) === true
    this.#concurrency = ++route.inFlight
    deps.active.add(this)
  }

  /** The client's x-request-id, else the upstream response's, else generated. */
  get id(): string {
    return this.#id
  }

  get route(): RouteRuntime {
    return this.#route
  }

  get tReq(): number {
    return this.#tReq
  }

  get method(): string {
    return this.#method
  }

  /** Path after the route prefix, without the query. */
  get path(): string {
    return this.#path
  }

  get chunks(): ChunkLog {
    return this.#chunks
  }

  get provider(): string {
    return this.#provider
  }

  /** The response status so far (0 before a response head). */
  get statusCode(): number {
    return this.#statusCode
  }

  get tHeaders(): number | undefined {
    return this.#tHeaders
  }

  get failure(): FailureCode | undefined {
    return this.#failure
  }

  /** The route's requests in flight when this one started, itself included. */
  get concurrency(): number {
    return this.#concurrency
  }

  /** The measurement recorded when the exchange finished (undefined while it is in flight). */
  get measured(): Measurement | undefined {
    return this.#measured
  }

  /** The request's model: its body's `model`, else the path's (Gemini, Vertex, Bedrock, Azure deployments). */
  get requestModel(): string | undefined {
    return this.#body?.model ?? this.#pathModel
  }

  /** The request body streams upstream through this watch (its size and `model` fill in as it goes). */
  bodyStreaming(watch: BodyWatch): void {
    this.#body = watch
  }

  /** The request body was read whole (`bytes` long, `model` sniffed from it) before going upstream. */
  bodyRead(model: string | undefined, bytes: number): void {
    this.#body = { model, bytes }
  }

  /** `stream_options.include_usage` was added to this request (the route's `inject_usage`). */
  usageInjected(): void {
    this.#injected = true
  }

  /** The request head went to the upstream at `at`. */
  requestSent(at: number): void {
    this.#tRequestSent ??= at
  }

  /**
   * Upstream response headers arrived: the tap (tap.ts, by the registry) reads what follows. `requestId`: the response's x-request-id;
   * `header`: any other response header by lower-case name (for timings a provider sends there).
   */
  responseStarted(statusCode: number, contentType: string | undefined, contentEncoding: string | undefined, at: number, requestId?: string, header?: (lowerName: string) => string | undefined): void {
    this.#statusCode = statusCode
    this.#tHeaders = at
    // The provider's own id (OpenAI's req_…) is the one its support can look up.
    if (this.#idGenerated && requestId !== undefined && requestId.length > 0 && requestId.length <= MAX_REQUEST_ID_LENGTH) this.#id = requestId
    if (contentType === undefined || isBodiless(this.#method, statusCode)) return
    const opened = tapResponse(
      this.#route.provider,
      { path: this.#path, contentType, maxEventBytes: this.#deps.maxEventBytes, countTokens: this.#countTokens },
      contentEncoding,
      this.#onContent,
      header,
    )
    this.#provider = opened.provider
    this.#headerTimes = opened.reported
    this.#tap = opened.tap
    this.#streamed = opened.tap?.streamed === true
    if (opened.tap === undefined && this.#ownsPath && isSuccess(statusCode)) this.#unreadable = `no parser for content-type '${contentType.slice(0, 100)}'`
  }

  /**
   * The proxy or the upstream failed the request; of several, the one kept is decided by
   * `failurePrevails` (upstream-errors.ts), not by call order. `detail`: the underlying code
   * (undici's, the socket's), for the log line.
   */
  fail(code: FailureCode, detail?: string): void {
    if (!failurePrevails(code, this.#failure)) return
    this.#failure = code
    this.#failureDetail = detail
  }

  /** The proxy answered the client itself (an error body of `bytes`), with this status. */
  answered(statusCode: number, bytes: number): void {
    this.#statusCode = statusCode
    this.#bytesOut += bytes
  }

  /**
   * A read from the upstream, already written to the client: it arrived at `at` and its write
   * returned at `writtenAt`.
   */
  data(chunk: Buffer, at: number, writtenAt: number): void {
    this.#bytesOut += chunk.length
    const tap = this.#tap
    if (tap === undefined) return
    const before = this.#chunks.count
    this.#counter?.newRead()
    tap.push(chunk, at)
    if (this.#chunks.count > before) {
      // A read that completed content (the parse is synchronous for identity bodies; an inflated
      // body's content lands later and is not attributed to a read).
      const cost = writtenAt - at
      if (before === 0) this.#firstChunkOverhead = cost
      this.#contentReadOverhead += cost
      this.#contentReads++
    }
  }

  /**
   * The response's bytes go through a writer that measures how long the client's socket holds
   * them (the ClientWriter; not @fastify/http-proxy's reply): its streams observe the wait, 0 included.
   */
  clientWritesWatched(): void {
    this.#clientWaitMs ??= 0
  }

  /** The client's socket would not take the response's bytes for `ms` (a write returned false, until 'drain' or the close). */
  clientWaited(ms: number): void {
    this.#clientWaitMs = (this.#clientWaitMs ?? 0) + ms
  }

  readonly #countTokens = (text: string): number => {
    this.#counter ??= new ReadBudget(this.#deps.encodings.counterFor(this.requestModel), this.#deps.now)
    return this.#counter.count(text)
  }

  readonly #onContent = (event: ContentEvent, at: number): void => {
    this.#chunks.add(at, event.tokens, KIND[event.kind], event.exact)
  }

  #endParse(): StreamSummary | Promise<StreamSummary> {
    this.#summary ??= this.#tap?.end() ?? {}
    return this.#summary
  }

  /**
   * The figures as they stand when the upstream's body ended at `at` (for a `Server-Timing`
   * trailer), or undefined while a compressed body is still being inflated. The final
   * measurement, at the response's close, agrees with it on every figure but E2E.
   */
  measureNow(at: number): Measurement | undefined {
    const summary = this.#endParse()
    if (summary instanceof Promise) return undefined
    return this.#measure(summary, at, false)
  }

  /**
   * The response is over at `tEnd`: `clientGone` when the client closed before the last byte
   * was written. Measures and records once.
   */
  finish(tEnd: number, clientGone: boolean): void {
    if (this.#finished) return
    this.#finished = true
    const summary = this.#endParse()
    if (summary instanceof Promise) void summary.then((s) => this.#done(s, tEnd, clientGone))
    else this.#done(summary, tEnd, clientGone)
  }

  #measure(parsed: StreamSummary, tEnd: number, clientGone: boolean): Measurement {
    const headerTimes = this.#headerTimes
    // What the body reported wins over the same phase in a header.
    const summary = headerTimes === undefined ? parsed : { ...parsed, reported: { ...headerTimes, ...parsed.reported } }
    return measure({
      tReq: this.#tReq,
      tEnd,
      tHeaders: this.#tHeaders,
      statusCode: this.#statusCode,
      failure: this.#failure,
      failureDetail: this.#failureDetail,
      clientGone: clientGone && this.#failure === undefined,
      chunks: this.#chunks,
      summary,
      unreadable: this.#unreadable,
      slo: this.#route.slo,
      stallSeconds: this.#deps.stallSeconds,
      clientWriteWaitMs: this.#streamed ? this.#clientWaitMs : undefined,
    })
  }

  #done(summary: StreamSummary, tEnd: number, clientGone: boolean): void {
    const deps = this.#deps
    deps.active.delete(this)
    this.#route.inFlight--
    const m = this.#measure(summary, tEnd, clientGone)
    this.#measured = m
    const who = this.#identity(summary)
    try {
      deps.record(who, m)
    } catch (err) {
      deps.onRecordError(err, who)
    }
  }

  #identity(summary: StreamSummary): RequestFacts {
    const s = 1 / 1000
    return {
      id: this.#id,
      route: this.#route,
      provider: this.#provider,
      tenant: this.tenant,
      method: this.#method,
      path: this.#path,
      model: this.requestModel ?? summary.model,
      responseModel: summary.model,
      usageInjected: this.#injected,
      concurrency: this.#concurrency,
      bytesIn: this.#body?.bytes ?? 0,
      bytesOut: this.#bytesOut,
      tReq: this.#tReq,
      overhead: {
        request: this.#tRequestSent === undefined ? undefined : Math.max(0, this.#tRequestSent - this.#tReq) * s,
        firstChunk: this.#firstChunkOverhead === undefined ? undefined : Math.max(0, this.#firstChunkOverhead) * s,
        chunk: this.#contentReads === 0 ? undefined : Math.max(0, this.#contentReadOverhead / this.#contentReads) * s,
      },
      // Tokens the read budget estimated linearly (a long text in one read) are said on the log line.
      extra: this.#counter !== undefined && this.#counter.estimated > 0 ? { ...summary.extra, tokens_estimated_linearly: this.#counter.estimated } : summary.extra,
      failureDetail: this.#failureDetail,
      trace: this.trace,
    }
  }
}
