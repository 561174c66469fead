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
import type { TraceStart } from '../record/trace-context.ts'
import { isBodiless, isSuccess } from '../http-status.ts'

/**
 * One request's measuring state: the byte path reports events to it, and `finish()` runs once,
 * turning the facts into a `Measurement` for `record`. Reads no clock: every time is given.
 */

export interface RouteRuntime {
  /** The `route` label: the route's name, else its prefix. */
  readonly label: string
  readonly prefix: string
  readonly provider: string
  readonly slo?: RouteSlo
  /** Kept by the exchanges themselves. */
  inFlight: number
  readonly echoRequestId?: boolean
  readonly serverTiming?: boolean
}

export interface ExchangeDeps {
  readonly encodings: EncodingSelector
  readonly now: () => number
  readonly maxEventBytes: number
  /** A longer gap between content chunks (seconds) is a stall. */
  readonly stallSeconds: number
  readonly active: Set<Exchange>
  /** Must not throw. */
  readonly record: (who: RequestFacts, m: Measurement) => void
  /** Measuring must never take the proxy down. */
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
  #summary: StreamSummary | Promise<StreamSummary> | undefined
  #headerTimes: ReportedTimes | undefined
  /** The answer is a stream its parser reads as it comes (not a whole JSON answer read at the end). */
  #streamed = false
  /** ms the response's bytes waited for the client's socket, when the ClientWriter writes them. */
  #clientWaitMs: number | undefined
  #firstChunkOverhead: number | undefined
  #contentReadOverhead = 0
  #contentReads = 0
  /** A cluster worker tells its primary how each request ended. */
  #measured: Measurement | undefined

  readonly tenant: string | undefined
  trace: TraceStart | undefined

  constructor(
    deps: ExchangeDeps,
    route: RouteRuntime,
    id: string,
    method: string,
    path: string,
    tReq: number,
    idGenerated = false,
    tenant?: string,
  ) {
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

  get path(): string {
    return this.#path
  }

  get chunks(): ChunkLog {
    return this.#chunks
  }

  get provider(): string {
    return this.#provider
  }

  /** 0 before a response head. */
  get statusCode(): number {
    return this.#statusCode
  }

  get tHeaders(): number | undefined {
    return this.#tHeaders
  }

  get failure(): FailureCode | undefined {
    return this.#failure
  }

  get concurrency(): number {
    return this.#concurrency
  }

  get measured(): Measurement | undefined {
    return this.#measured
  }

  /** Its body's `model`, else the path's (Gemini, Vertex, Bedrock, Azure deployments). */
  get requestModel(): string | undefined {
    return this.#body?.model ?? this.#pathModel
  }

  bodyStreaming(watch: BodyWatch): void {
    this.#body = watch
  }

  bodyRead(model: string | undefined, bytes: number): void {
    this.#body = { model, bytes }
  }

  usageInjected(): void {
    this.#injected = true
  }

  requestSent(at: number): void {
    this.#tRequestSent ??= at
  }

  /** `header`: a response header by lower-case name (a provider may send timings there). */
  responseStarted(
    statusCode: number,
    contentType: string | undefined,
    contentEncoding: string | undefined,
    at: number,
    requestId?: string,
    header?: (lowerName: string) => string | undefined,
  ): void {
    this.#statusCode = statusCode
    this.#tHeaders = at
    // The provider's own id (OpenAI's req_…) is the one its support can look up.
    if (
      this.#idGenerated &&
      requestId !== undefined &&
      requestId.length > 0 &&
      requestId.length <= MAX_REQUEST_ID_LENGTH
    )
      this.#id = requestId
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
    if (opened.tap === undefined && this.#ownsPath && isSuccess(statusCode))
      this.#unreadable = `no parser for content-type '${contentType.slice(0, 100)}'`
  }

  /** Of several failures, `failurePrevails` (upstream-errors.ts) decides which is kept, not call order. */
  fail(code: FailureCode, detail?: string): void {
    if (!failurePrevails(code, this.#failure)) return
    this.#failure = code
    this.#failureDetail = detail
  }

  answered(statusCode: number, bytes: number): void {
    this.#statusCode = statusCode
    this.#bytesOut += bytes
  }

  /** A read from the upstream, already written to the client (its write returned at `writtenAt`). */
  data(chunk: Buffer, at: number, writtenAt: number): void {
    this.#bytesOut += chunk.length
    const tap = this.#tap
    if (tap === undefined) return
    const before = this.#chunks.count
    this.#counter?.newRead()
    tap.push(chunk, at)
    if (this.#chunks.count > before) {
      // An inflated body's content lands later, so only an identity body's parse is attributed to a read.
      const cost = writtenAt - at
      if (before === 0) this.#firstChunkOverhead = cost
      this.#contentReadOverhead += cost
      this.#contentReads++
    }
  }

  clientWritesWatched(): void {
    this.#clientWaitMs ??= 0
  }

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
   * The figures when the upstream's body ended, for a `Server-Timing` trailer (undefined while a
   * compressed body is still inflating); the final measurement differs only in E2E.
   */
  measureNow(at: number): Measurement | undefined {
    const summary = this.#endParse()
    if (summary instanceof Promise) return undefined
    return this.#measure(summary, at, false)
  }

  /** Measures and records once; `clientGone` when the client closed before the last byte was written. */
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
      // Tokens the read budget estimated linearly (a long text in one read) go on the log line.
      extra:
        this.#counter !== undefined && this.#counter.estimated > 0
          ? { ...summary.extra, tokens_estimated_linearly: this.#counter.estimated }
          : summary.extra,
      failureDetail: this.#failureDetail,
      trace: this.trace,
    }
  }
}
