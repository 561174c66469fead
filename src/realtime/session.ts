import type { FailureCode } from '../errors.ts'
import { UNKNOWN } from '../record/labels.ts'
import { isObject } from '../parsers/json.ts'
import type { Json } from '../parsers/json.ts'
import { Outcome } from '../timing/measurement.ts'
import { sessionOutcome } from '../timing/realtime-timing.ts'
import type { EncodingSelector, TokenCount } from '../tokens/tokenizer.ts'
import type { RouteRuntime } from '../proxy/exchange.ts'
import type { TraceStart } from '../record/trace-context.ts'
import { Opcode } from './frame.ts'
import { FrameBoundary, FrameDecoder } from './frame-decoder.ts'
import { GeminiLive } from './gemini-live.ts'
import { OpenAIRealtime } from './openai-realtime.ts'
import { MORE, MessageInflater, SHARED_UP_TO } from './permessage-deflate.ts'
import type { DeflateTerms } from './permessage-deflate.ts'
import type { FinishedResponse, InFlightVisitor, ProtocolContext, RealtimeProtocol } from './protocol.ts'
import type { RelayEnd, RelayObserver, Side } from './relay.ts'
import { SteppedJson, wholeCost } from './stepped-json.ts'

/**
 * One realtime session's measuring state: per direction a frame decoder (and inflater) over a
 * copy of the relayed bytes, and the provider's protocol turning messages into responses. Reads no
 * clock: every time is given.
 */

export interface SessionIdentity {
  /** Unique in this process (ids are the client's, and may repeat). */
  readonly seq: number
  readonly id: string
  readonly route: RouteRuntime
  readonly provider: string
  readonly tenant: string | undefined
  /** The query's `model` (Azure: `deployment`), else the one the session named. */
  readonly model: string | undefined
  readonly path: string
  /** ms, monotonic. */
  readonly tReq: number
  readonly trace?: TraceStart
}

/** A finished session's facts (no text, no headers, no credentials). */
export interface SessionSummary {
  readonly outcome: Outcome
  /** 101, the refused upgrade's status, or the proxy's own error status. */
  readonly statusCode: number
  /** Why the proxy failed the upgrade or ended the session, when it did. */
  readonly failure: FailureCode | undefined
  /** Seconds, from the upgrade request to the last connection closed. */
  readonly duration: number
  /** The first close frame: who sent it, its code and reason (bounded). */
  readonly close: { readonly from: Side; readonly code: number | undefined; readonly reason: string } | undefined
  /** `proxy`: a timeout or shutting down. */
  readonly endedBy: Side | 'proxy' | undefined
  readonly bytesFromClient: number
  readonly bytesFromUpstream: number
  readonly messagesFromClient: number
  readonly messagesFromUpstream: number
  readonly unread: number
  readonly parseError: string | undefined
  readonly responses: number
}

export interface RealtimeDeps {
  readonly encodings: EncodingSelector
  /** The most bytes of one message the measuring side holds (`limits.max_event_bytes`). */
  readonly maxMessageBytes: number
  readonly sessions: Set<RealtimeSession>
  /** Must not throw. */
  readonly recordResponse: (who: SessionIdentity, response: FinishedResponse) => void
  readonly recordSession: (who: SessionIdentity, summary: SessionSummary) => void
  readonly onRecordError: (err: unknown, who: SessionIdentity) => void
}

/** A close frame allows 123 bytes of reason. */
const MAX_REASON = 123

/**
 * Inflating and parsing are synchronous and their cost is not bounded by the bytes read, so one
 * event-loop turn does about INFLATE_TURN of work for one session, counted as bytes of output
 * inflated (each compressed message INFLATE_CALL more, for the call; each uncompressed one READ_CALL,
 * for reading what it says: a text delta's tokens) and what parsing costs
 * (`wholeCost`, SteppedJson's `spent`: a text of tiny tokens costs far more than its bytes; the
 * bytes of a message parsed whole are counted once, as inflated when it was compressed); a
 * message costing more goes on in the next turns (sized in bench/lab/inflate-budget.ts). Once a
 * turn's budget is spent, the frames after it wait undecoded (a read of thousands of tiny frames
 * costs the budget, not thousands of messages), and so do later reads, in order, with their
 * arrival times. A session whose waiting bytes exceed twice the message limit stops being measured.
 */
const INFLATE_TURN = 128 * 1024
/**
 * The most payload bytes a turn gathers (copies and unmasks), besides INFLATE_TURN: a message's
 * payload is counted when it is read, not as it is gathered, so a turn that caught up on a backlog
 * gathered a whole message of up to the limit (1 MiB: 1.5–2 ms, its fresh buffer's pages included).
 */
const DECODE_TURN = 128 * 1024
const INFLATE_CALL = 2 * 1024
const READ_CALL = 512
const BROKEN_CALL = 256

/** A read, or its rest, not decoded yet. */
interface Waiting {
  readonly from: Side
  readonly chunk: Buffer
  offset: number
  readonly at: number
}

/**
 * The message being read over turns (later ones wait behind it): being inflated (its inflater holds
 * it), to be parsed whole at the start of the next turn (`whole`: its cost fits a turn, not what was
 * left of this one), or being parsed in steps (`json`).
 */
interface Reading {
  readonly from: Side
  readonly opcode: number
  readonly at: number
  readonly inflating: boolean
  readonly whole: { readonly text: string; readonly cost: number } | undefined
  readonly json: SteppedJson | undefined
}

/** Which protocol a message speaks: OpenAI's events have a string `type`, Gemini's a known top-level key. */
const GEMINI_KEYS = [
  'setup',
  'setupComplete',
  'serverContent',
  'clientContent',
  'realtimeInput',
  'toolResponse',
  'toolCall',
  'usageMetadata',
] as const

function protocolOf(message: Json): 'openai' | 'gemini' | undefined {
  if (typeof message.type === 'string') return 'openai'
  for (const key of GEMINI_KEYS) if (isObject(message[key])) return 'gemini'
  return undefined
}

let made = 0

export class RealtimeSession implements RelayObserver {
  readonly #seq = ++made
  readonly #deps: RealtimeDeps
  readonly #route: RouteRuntime
  readonly #id: string
  readonly #path: string
  readonly #tReq: number
  #provider: string
  readonly #queryModel: string | undefined
  #sessionModel: string | undefined
  #counter: TokenCount | undefined
  #protocol: RealtimeProtocol | undefined
  #decoders: Record<Side, FrameDecoder> | undefined
  #boundaries: Record<Side, FrameBoundary> | undefined
  #inflaters: Record<Side, MessageInflater> | undefined
  /** A message takes the arrival time of the read that completed it. */
  #at = 0
  #inflateRoom = INFLATE_TURN
  #decodeRoom = DECODE_TURN
  #waiting: Waiting[] = []
  #waitingHead = 0
  #waitingBytes = 0
  #reading: Reading | undefined
  #scheduled = false
  /** The session's connections closed while messages were waiting: it finishes once they are read. */
  #ending: { readonly at: number; readonly end: RelayEnd } | undefined
  #statusCode = 0
  #failure: FailureCode | undefined
  #refused = false
  #close: { from: Side; code: number | undefined; reason: string } | undefined
  readonly #bytes = { client: 0, upstream: 0 }
  readonly #messages = { client: 0, upstream: 0 }
  #unread = 0
  #broken: string | undefined
  #responses = 0
  #finished = false
  readonly #context: ProtocolContext

  readonly tenant: string | undefined
  trace: TraceStart | undefined

  constructor(
    deps: RealtimeDeps,
    route: RouteRuntime,
    id: string,
    path: string,
    query: URLSearchParams,
    tReq: number,
    tenant?: string,
  ) {
    this.#deps = deps
    this.tenant = tenant
    this.#route = route
    this.#id = id
    this.#path = path
    this.#tReq = tReq
    this.#provider = providerFor(route.provider, path)
    this.#queryModel = (query.get('model') ?? query.get('deployment') ?? undefined)?.slice(0, 200) || undefined
    this.#context = {
      countTokens: (text) => {
        this.#counter ??= this.#deps.encodings.counterFor(this.model)
        return this.#counter(text)
      },
      finished: (response) => this.#responseEnded(response),
      model: (name) => {
        this.#sessionModel ??= name.slice(0, 200)
      },
    }
    if (this.#provider === 'gemini') this.#protocol = new GeminiLive(this.#context)
    else if (this.#provider === 'openai') this.#protocol = new OpenAIRealtime(this.#context)
    deps.sessions.add(this)
  }

  get id(): string {
    return this.#id
  }

  get route(): RouteRuntime {
    return this.#route
  }

  get provider(): string {
    return this.#provider
  }

  get model(): string | undefined {
    return this.#queryModel ?? this.#sessionModel
  }

  get tReq(): number {
    return this.#tReq
  }

  get path(): string {
    return this.#path
  }

  get responsesInFlight(): number {
    return this.#protocol?.inFlight ?? 0
  }

  /** Unique in this process (SessionIdentity's `seq`). */
  get seq(): number {
    return this.#seq
  }

  /** Its responses in flight, for the cluster's progress reports (RealtimeProtocol#forEachInFlight). */
  forEachResponseInFlight(visit: InFlightVisitor): void {
    this.#protocol?.forEachInFlight(visit)
  }

  get held(): number {
    return (
      (this.#decoders?.client.held ?? 0) +
      (this.#decoders?.upstream.held ?? 0) +
      (this.#inflaters?.client.held ?? 0) +
      (this.#inflaters?.upstream.held ?? 0) +
      (this.#reading?.json?.held ?? 0) +
      (this.#reading?.whole?.text.length ?? 0) +
      this.#waitingBytes
    )
  }

  opened(deflate: DeflateTerms | undefined): void {
    this.#statusCode = 101
    const max = this.#deps.maxMessageBytes
    this.#decoders = {
      client: new FrameDecoder(this.#sink('client'), max),
      upstream: new FrameDecoder(this.#sink('upstream'), max),
    }
    this.#boundaries = { client: new FrameBoundary(), upstream: new FrameBoundary() }
    if (deflate !== undefined) {
      this.#inflaters = {
        client: new MessageInflater(!deflate.clientNoContextTakeover, max),
        upstream: new MessageInflater(!deflate.serverNoContextTakeover, max),
      }
    }
  }

  /** The upstream refused the upgrade; its answer went to the client unchanged. */
  refused(statusCode: number): void {
    this.#statusCode = statusCode
    this.#refused = true
  }

  failed(code: FailureCode, statusCode: number): void {
    this.#failure ??= code
    this.#refused = true
    if (statusCode > 0) this.#statusCode = statusCode
  }

  // RelayObserver

  data(from: Side, chunk: Buffer, at: number): void {
    this.#bytes[from] += chunk.length
    this.#boundaries?.[from].push(chunk)
    if (this.#decoders === undefined || this.#broken !== undefined) return
    const read: Waiting = { from, chunk, offset: 0, at }
    if (this.#behind()) {
      this.#wait(read)
      return
    }
    this.#inflateRoom = INFLATE_TURN
    this.#decodeRoom = DECODE_TURN
    try {
      this.#decode(read)
    } catch (err) {
      // A bug in measuring costs this session its figures, never the relay or the process.
      this.#broken = `measuring failed: ${(err as Error).message}`.slice(0, 200)
      return
    }
    if (read.offset < chunk.length) this.#wait(read)
  }

  atFrameBoundary(to: Side): boolean {
    // What goes to the client is what the upstream sends, and the other way round.
    const from = to === 'client' ? 'upstream' : 'client'
    return this.#boundaries?.[from].atBoundary === true && this.#decoders?.[from].failure === undefined
  }

  closed(end: RelayEnd, at: number): void {
    if (end.proxyReason === 'idle' || end.proxyReason === 'total')
      this.#failure ??=
        end.proxyReason === 'idle' ? 'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT' : 'TOKENTAP_ERR_UPSTREAM_TIMEOUT'
    if (this.#waitingHead < this.#waiting.length || this.#reading !== undefined) this.#ending = { at, end }
    else this.finish(at, end)
  }

  /** Ends open responses (cancelled when the client left first, else error), then records the session once. */
  finish(at: number, end?: RelayEnd): void {
    if (this.#finished) return
    this.#finished = true
    this.#deps.sessions.delete(this)
    this.#abandon()
    // A message gathered over turns (DECODE_TURN) may be half in its decoder.
    this.#decoders?.client.release()
    this.#decoders?.upstream.release()
    this.#inflaters?.client.close()
    this.#inflaters?.upstream.close()
    const clientLeft = (this.#close?.from ?? end?.first) === 'client'
    try {
      this.#protocol?.end(clientLeft ? Outcome.cancelled : Outcome.error, at)
    } catch (err) {
      this.#broken ??= `measuring failed: ${(err as Error).message}`.slice(0, 200)
    }
    const outcome = sessionOutcome({
      refused: this.#refused || end === undefined,
      first: end?.first ?? 'upstream',
      abrupt: end?.abrupt ?? false,
      proxyReason: end?.proxyReason,
      firstClose: this.#close,
    })
    const parseError =
      this.#broken ??
      this.#decoders?.client.failure ??
      this.#decoders?.upstream.failure ??
      this.#inflaters?.client.broken ??
      this.#inflaters?.upstream.broken
    const summary: SessionSummary = {
      outcome,
      statusCode: this.#statusCode,
      failure: this.#failure,
      duration: Math.max(0, at - this.#tReq) / 1000,
      close: this.#close,
      endedBy: end?.first,
      bytesFromClient: this.#bytes.client,
      bytesFromUpstream: this.#bytes.upstream,
      messagesFromClient: this.#messages.client,
      messagesFromUpstream: this.#messages.upstream,
      unread: this.#unread,
      parseError,
      responses: this.#responses,
    }
    const who = this.#identity()
    try {
      this.#deps.recordSession(who, summary)
    } catch (err) {
      this.#deps.onRecordError(err, who)
    }
  }

  #identity(): SessionIdentity {
    return {
      seq: this.#seq,
      id: this.#id,
      route: this.#route,
      provider: this.#provider,
      tenant: this.tenant,
      model: this.model,
      path: this.#path,
      tReq: this.#tReq,
      trace: this.trace,
    }
  }

  #responseEnded(response: FinishedResponse): void {
    this.#responses++
    const who = this.#identity()
    try {
      this.#deps.recordResponse(who, response)
    } catch (err) {
      this.#deps.onRecordError(err, who)
    }
  }

  #sink(from: Side): {
    message(opcode: number, payload: Buffer | undefined, compressed: boolean, size: number): boolean
    close(code: number | undefined, reason: string): void
  } {
    return {
      message: (opcode, payload, compressed) => this.#message(from, opcode, payload, compressed),
      close: (code, reason) => {
        this.#close ??= { from, code, reason: reason.slice(0, MAX_REASON) }
      },
    }
  }

  /** Read at once; false (decode no further this turn) once the turn's budget is spent or a message goes on over turns. */
  #message(from: Side, opcode: number, payload: Buffer | undefined, compressed: boolean): boolean {
    this.#messages[from]++
    this.#read(from, opcode, payload, compressed, this.#at)
    return this.#reading === undefined && this.#inflateRoom > 0
  }

  /** Messages are read in order, so a read waits while one before it is being read or waits. */
  #behind(): boolean {
    return this.#reading !== undefined || this.#waitingHead < this.#waiting.length
  }

  /** Decodes (and reads) the read's frames from its offset until the turn's budgets are spent; moves its offset. */
  #decode(read: Waiting): void {
    this.#at = read.at
    // Set before any read is decoded: `data` reads nothing before the session opened.
    const decoder = (this.#decoders as Record<Side, FrameDecoder>)[read.from]
    read.offset = decoder.push(read.chunk, read.offset, this.#decodeRoom)
    this.#decodeRoom -= decoder.gathered
  }

  #wait(read: Waiting): void {
    this.#waiting.push(read)
    this.#waitingBytes += read.chunk.length - read.offset
    if (this.#waitingBytes > 2 * this.#deps.maxMessageBytes) {
      this.#broken ??= `inflate budget: messages waiting to be read over ${2 * this.#deps.maxMessageBytes} bytes`
      this.#abandon()
      return
    }
    this.#schedule()
  }

  #schedule(): void {
    if (this.#scheduled) return
    this.#scheduled = true
    setImmediate(this.#nextTurn)
  }

  /** The messages not read yet (those whose bytes came, from the frame headers) are counted unread and let go. */
  #abandon(): void {
    if (this.#waitingHead < this.#waiting.length && this.#boundaries !== undefined)
      for (const side of ['client', 'upstream'] as const) {
        if (this.#decoders?.[side].failure !== undefined) continue
        const undecoded = this.#boundaries[side].messages - this.#messages[side]
        // A message whose bytes came only in part is counted by neither.
        if (undecoded > 0) {
          this.#unread += undecoded
          this.#messages[side] += undecoded
        }
      }
    if (this.#reading !== undefined) {
      this.#unread++
      if (this.#reading.inflating) this.#inflaters?.[this.#reading.from].close()
    }
    this.#reading = undefined
    this.#waiting = []
    this.#waitingHead = 0
    this.#waitingBytes = 0
  }

  readonly #nextTurn = (): void => {
    this.#scheduled = false
    if (this.#finished) return
    this.#inflateRoom = INFLATE_TURN
    this.#decodeRoom = DECODE_TURN
    try {
      if (this.#reading !== undefined && this.#broken === undefined) this.#resume()
      while (
        this.#reading === undefined &&
        this.#waitingHead < this.#waiting.length &&
        this.#broken === undefined &&
        this.#inflateRoom > 0 &&
        this.#decodeRoom > 0
      ) {
        const read = this.#waiting[this.#waitingHead]
        const offset = read.offset
        this.#decode(read)
        this.#waitingBytes -= read.offset - offset
        if (read.offset === read.chunk.length) this.#waitingHead++
      }
    } catch (err) {
      this.#broken = `measuring failed: ${(err as Error).message}`.slice(0, 200)
    }
    if (this.#broken === undefined && (this.#reading !== undefined || this.#waitingHead < this.#waiting.length)) {
      this.#schedule()
      return
    }
    this.#abandon()
    const ending = this.#ending
    if (ending !== undefined) this.finish(ending.at, ending.end)
  }

  #read(from: Side, opcode: number, payload: Buffer | undefined, compressed: boolean, at: number): void {
    const inflater = this.#inflaters?.[from]
    if (payload === undefined) {
      this.#unread++
      if (compressed) inflater?.missed()
      return
    }
    if (!compressed) {
      this.#parse(from, opcode, payload, at, false)
      return
    }
    if (inflater === undefined) {
      this.#unread++
      return
    }
    // A direction whose deflate context broke inflates nothing more: its messages cost their decoding.
    this.#inflateRoom -= inflater.broken === undefined ? INFLATE_CALL : payload.length + BROKEN_CALL
    inflater.begin(payload)
    this.#reading = { from, opcode, at, inflating: true, whole: undefined, json: undefined }
    this.#resume()
  }

  /** Goes on with the message being read as far as this turn's room goes; it is dispatched once parsed. */
  #resume(): void {
    const m = this.#reading
    if (m === undefined) return
    if (m.inflating) {
      const inflater = this.#inflaters?.[m.from]
      if (inflater === undefined) return
      const text = inflater.step(this.#inflateRoom)
      this.#inflateRoom -= inflater.produced
      if (text === MORE) {
        this.#schedule()
        return
      }
      this.#reading = undefined
      if (text === undefined) this.#unread++
      else this.#parse(m.from, m.opcode, text, m.at, true)
      return
    }
    if (m.whole !== undefined) {
      // The start of a turn: its room holds the whole message's cost.
      this.#reading = undefined
      this.#inflateRoom -= m.whole.cost
      this.#parseWhole(m.from, m.whole.text, m.at)
      return
    }
    const json = m.json as SteppedJson
    const done = json.step(this.#inflateRoom)
    this.#inflateRoom -= json.spent
    if (!done) {
      this.#schedule()
      return
    }
    this.#reading = undefined
    if (json.failed) this.#unread++
    else this.#dispatch(m.from, json.value, m.at)
  }

  /**
   * How a data message's JSON is parsed within the budget, decided here only: whole with one
   * `JSON.parse` now when its cost (`wholeCost`) fits what is left of this turn's room, whole at
   * the start of the next turn when it fits a turn, else in steps over turns (SteppedJson, its
   * steps' `spent`), with exactly `JSON.parse`'s result. `inflated`: its bytes were counted, and
   * a message up to SHARED_UP_TO bytes is a view of the inflaters' shared output, copied to be kept.
   */
  #parse(from: Side, opcode: number, bytes: Buffer, at: number, inflated: boolean): void {
    if (!isJsonMessage(opcode, bytes)) return
    const whole = wholeCost(bytes, INFLATE_TURN)
    if (whole !== undefined) {
      // An inflated message's bytes were counted as they were inflated (inflating a byte costs
      // about what parsing it whole does), so an audio read is still read in its own turn.
      const cost = inflated ? whole.cost - bytes.length : whole.cost + READ_CALL
      if (cost <= this.#inflateRoom) {
        this.#inflateRoom -= cost
        this.#parseWhole(from, whole.text, at)
      } else {
        this.#reading = { from, opcode, at, inflating: false, whole: { text: whole.text, cost }, json: undefined }
        this.#schedule()
      }
      return
    }
    if (!inflated) this.#inflateRoom -= READ_CALL
    const json = new SteppedJson(inflated && bytes.length <= SHARED_UP_TO ? Buffer.from(bytes) : bytes)
    this.#reading = { from, opcode, at, inflating: false, whole: undefined, json }
    // Out of room, a step still goes through SteppedJson's least (1 KiB, a few tokens).
    this.#resume()
  }

  #parseWhole(from: Side, text: string, at: number): void {
    let message: unknown
    try {
      message = JSON.parse(text)
    } catch {
      this.#unread++
      return
    }
    this.#dispatch(from, message, at)
  }

  #dispatch(from: Side, message: unknown, at: number): void {
    if (!isObject(message)) return
    if (this.#protocol === undefined) {
      const kind = protocolOf(message)
      if (kind === undefined) return
      this.#protocol = kind === 'gemini' ? new GeminiLive(this.#context) : new OpenAIRealtime(this.#context)
      if (this.#provider === UNKNOWN) this.#provider = kind
    }
    if (from === 'client') this.#protocol.client(message, at)
    else this.#protocol.server(message, at)
  }
}

/** Only a data message that starts as a JSON object is read (Gemini Live sends its JSON as binary frames). */
function isJsonMessage(opcode: number, text: Buffer): boolean {
  return (opcode === Opcode.text || opcode === Opcode.binary) && text.length > 0 && text[0] === 0x7b /* { */
}

/**
 * The route's provider, else the path's (`…/realtime` is OpenAI's or Azure's, labelled `openai` as
 * their HTTP APIs are), else found from the first message.
 */
function providerFor(routeProvider: string, path: string): string {
  if (routeProvider !== 'auto') return routeProvider
  if (path.includes('BidiGenerateContent')) return 'gemini'
  if (/\/realtime\/?$/.test(path)) return 'openai'
  return UNKNOWN
}
