import type { IncomingMessage } from 'node:http'
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import type { Config } from '../config/schema.ts'
import { Outcome } from '../timing/measurement.ts'
import type { RecordPolicy, SeriesLabels as Labels } from '../record/observations.ts'
import { writeRecordLine } from '../record/request-log.ts'
import type { RealtimeSink } from '../record/recorder.ts'
import type { RouteRuntime } from '../proxy/exchange.ts'
import type { UpstreamTarget } from '../proxy/route-path.ts'
import type { Upstream } from '../proxy/upstream.ts'
import type { TraceStart } from '../record/trace-context.ts'
import type { EncodingSelector } from '../tokens/tokenizer.ts'
import { closeRelays, passThrough } from './pass-through.ts'
import type { FinishedResponse } from './protocol.ts'
import type { WebSocketRelay } from './relay.ts'
import { sessionLogLine } from './session-log.ts'
import { RealtimeSession } from './session.ts'
import type { RealtimeDeps, SessionIdentity, SessionSummary } from './session.ts'
import type { PendingUpgrade } from './upgrade-listener.ts'

/**
 * The realtime sessions of one instance: opens one per WebSocket upgrade, keeps the open ones,
 * and sends each finished response and session to its sinks, listeners and the log.
 */

/** Where finished responses and sessions go, with the labels they count under. */
export interface RealtimeListener {
  response?(who: SessionIdentity, labels: Labels, response: FinishedResponse): void
  session?(who: SessionIdentity, labels: Labels, summary: SessionSummary): void
}

export interface RealtimeOptions {
  readonly config: Config
  readonly logger: Logger
  readonly encodings: EncodingSelector
  /** Shared with HTTP requests. */
  readonly policy: Pick<RecordPolicy, 'labelSetOf' | 'inFlightValues' | 'observeResponse'>
  readonly now: () => number
}

export class RealtimeSessions {
  readonly open = new Set<RealtimeSession>()
  readonly #relays = new Map<RealtimeSession, WebSocketRelay>()
  readonly #options: RealtimeOptions
  readonly #listeners: RealtimeListener[] = []
  readonly #sinks: RealtimeSink[] = []
  readonly #deps: RealtimeDeps
  #draining = false
  readonly #whenEmpty: Array<() => void> = []

  constructor(options: RealtimeOptions) {
    this.#options = options
    this.#deps = {
      encodings: options.encodings,
      maxMessageBytes: options.config.limits.max_event_bytes,
      sessions: this.open,
      recordResponse: this.#recordResponse,
      recordSession: this.#recordSession,
      onRecordError: (err, who) =>
        options.logger.error({ err, route: who.route.label }, 'recording a realtime session failed'),
    }
  }

  listen(listener: RealtimeListener): void {
    this.#listeners.push(listener)
  }

  addSink(sink: RealtimeSink): void {
    this.#sinks.push(sink)
  }

  /** At a scrape, which admits no model into the label bound. */
  inFlightValues(who: Pick<SessionIdentity, 'provider' | 'route' | 'model' | 'tenant'>): readonly string[] {
    return this.#options.policy.inFlightValues(who.provider, who.route.label, who.model, who.tenant)
  }

  pass(
    req: IncomingMessage,
    pending: PendingUpgrade,
    how: {
      route: RouteRuntime
      id: string
      tenant?: string
      tReq: number
      target: UpstreamTarget
      dispatcher: Dispatcher
      upstream: Upstream
      trace?: TraceStart
    },
  ): void {
    const q = how.target.pathAndQuery.indexOf('?')
    const query = new URLSearchParams(q < 0 ? '' : how.target.pathAndQuery.slice(q + 1))
    const session = new RealtimeSession(this.#deps, how.route, how.id, how.target.path, query, how.tReq, how.tenant)
    session.trace = how.trace
    passThrough(session, req, pending, {
      dispatcher: how.dispatcher,
      upstream: how.upstream,
      config: this.#options.config,
      pathAndQuery: how.target.pathAndQuery,
      now: this.#options.now,
      echoRequestId: how.route.echoRequestId === true,
      relays: this.#relays,
      draining: () => this.#draining,
    })
  }

  /** Idle sessions close now (1001: the client reconnects elsewhere), the rest as their responses end or at `deadlineMs`. */
  drain(deadlineMs: number): void {
    this.#draining = true
    closeRelays(this.#relays, 'shutdown', (s) => s.responsesInFlight === 0)
    setTimeout(() => closeRelays(this.#relays, 'shutdown'), deadlineMs).unref()
  }

  /** The HTTP server's close does not wait for upgraded sockets, which are no longer its own. */
  async drained(): Promise<void> {
    while (this.open.size > 0) await new Promise<void>((resolve) => this.#whenEmpty.push(resolve))
  }

  readonly #recordResponse = (who: SessionIdentity, response: FinishedResponse): void => {
    const set = this.#options.policy.labelSetOf(who)
    if (this.#sinks.length > 0) {
      const o = this.#options.policy.observeResponse(set, response)
      for (const sink of this.#sinks) sink.response(o)
    }
    for (const l of this.#listeners) l.response?.(who, set.labels, response)
    // Not inside this read's decoding: the relay may already have written part of a next frame.
    if (this.#draining) setImmediate(() => closeRelays(this.#relays, 'shutdown', (s) => s.responsesInFlight === 0))
  }

  readonly #recordSession = (who: SessionIdentity, summary: SessionSummary): void => {
    if (this.open.size === 0) for (const resolve of this.#whenEmpty.splice(0)) resolve()
    const set = this.#options.policy.labelSetOf(who)
    const labels = set.labels
    for (const sink of this.#sinks) sink.session(set, summary.outcome)
    for (const l of this.#listeners) l.session?.(who, labels, summary)
    const logger = this.#options.logger
    if (summary.parseError !== undefined)
      logger.warn(
        { request_id: who.id, route: labels.route, provider: labels.provider, reason: summary.parseError },
        'realtime session not fully measured (frames passed through unchanged)',
      )
    writeRecordLine(logger, summary.outcome === Outcome.error, 'realtime session', sessionLogLine, {
      who,
      labels,
      summary,
    })
  }
}
