import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { LiveStore } from '../admin/live/live-store.ts'
import type { Config } from '../config/schema.ts'
import type { FailureCode } from '../errors.ts'
import { nativeOptions } from '../metrics/prometheus/histogram.ts'
import { LlmMetrics } from '../metrics/llm/llm-metrics.ts'
import type { Exchange, RouteRuntime } from '../proxy/exchange.ts'
import { proxyRoute } from '../proxy/open-exchange.ts'
import { Recorder } from '../record/recorder.ts'
import { ChunkLog } from '../timing/chunk-log.ts'
import type { MarkKind } from '../timing/chunk-log.ts'
import { measure, Outcome, TokenSource } from '../timing/measurement.ts'
import type { ExchangeFacts } from '../timing/measurement.ts'
import { RecordPolicy } from '../record/observations.ts'
import type { RequestFacts } from '../record/observations.ts'
import { requestLog, writeRecordLine } from '../record/request-log.ts'
import { RealtimeMetrics } from '../metrics/llm/realtime-metrics.ts'
import { sessionLogLine } from '../realtime/session-log.ts'
import type { SessionIdentity, SessionSummary } from '../realtime/session.ts'
import { RealtimeMirror, WorkerRealtimeProgress } from './realtime-progress.ts'
import type { RealtimeBatch, RealtimeOrphans, RealtimeSource, SessionMeta } from './realtime-progress.ts'

/**
 * A dead worker's requests still count: each worker sends the primary, in batches every
 * `PROGRESS_MS` from a timer (nothing on the byte path), its requests in flight and how they
 * ended; when a worker exits, the primary records once each request no kept report counts, an
 * open one as TOKENTAP_ERR_WORKER_EXITED. What is lost is at most the last batch (docs/failure-modes.md).
 * Realtime sessions ride in the same batches (realtime-progress.ts).
 */

/** How often a worker sends what changed (a live page updates once a second; a scrape every few). */
export const PROGRESS_MS = 100
/** Ended requests kept per worker until a report covers them (no scrape for a long while): the oldest go first. */
const MAX_ENDED = 10_000

/** A request's identity and response head, sent when first seen and whenever they change. */
interface StreamMeta {
  readonly key: number
  readonly id: string
  readonly route: string
  readonly provider: string
  readonly model: string | undefined
  readonly tenant: string | undefined
  readonly method: string
  readonly path: string
  readonly tReq: number
  readonly concurrency: number
  readonly status: number
  readonly tHeaders: number | undefined
}

/** How a reported request ended (its worker recorded it, in a report that may never arrive). */
interface StreamEnd {
  readonly key: number
  readonly tEnd: number
  readonly status: number
  readonly failure: FailureCode | undefined
  readonly cancelled: boolean
  readonly providerError: string | undefined
  /** The provider's reported output tokens, when it reported them. */
  readonly usage: number | undefined
}

export interface ProgressBatch {
  readonly seq: number
  /** The sender's performance.timeOrigin: its monotonic ms plus this are wall-clock ms. */
  readonly origin: number
  readonly meta: readonly StreamMeta[]
  /** New content marks, by run: `runs[r]` marks of stream `keys[r]`, all exact when `exact[r]`. */
  readonly keys: Int32Array
  readonly runs: Uint32Array
  readonly exact: Uint8Array
  readonly at: Float64Array
  readonly tokens: Float64Array
  readonly kinds: Uint8Array
  readonly ended: readonly StreamEnd[]
  /** The realtime sessions' part, when any changed. */
  readonly realtime?: RealtimeBatch
}

interface Tracked {
  readonly key: number
  sent: number
  id: string
  provider: string
  model: string | undefined
  status: number
}

/** Worker side: which exchanges are in flight and what they measured, sent as it changes. */
export class WorkerProgress {
  readonly #active: ReadonlySet<Exchange>
  readonly #send: (batch: ProgressBatch) => void
  readonly #tracked = new Map<Exchange, Tracked>()
  readonly #realtime: WorkerRealtimeProgress | undefined
  #nextKey = 0
  #seq = 0

  constructor(active: ReadonlySet<Exchange>, send: (batch: ProgressBatch) => void, realtime?: RealtimeSource) {
    this.#active = active
    this.#send = send
    this.#realtime = realtime === undefined ? undefined : new WorkerRealtimeProgress(realtime)
  }

  /** Sends what changed since the last batch; the number of the last batch sent (this one, or an earlier one when nothing changed). */
  flush(): number {
    const meta: StreamMeta[] = []
    const ended: StreamEnd[] = []
    const keys: number[] = []
    const runs: number[] = []
    const exact: number[] = []
    const at: number[] = []
    const tokens: number[] = []
    const kinds: number[] = []
    const marks = (t: Tracked, ex: Exchange): void => {
      const log = ex.chunks
      if (log.count <= t.sent) return
      keys.push(t.key)
      runs.push(log.count - t.sent)
      exact.push(log.allExact ? 1 : 0)
      for (let i = t.sent; i < log.count; i++) {
        at.push(log.at(i))
        tokens.push(log.tokens(i))
        kinds.push(log.kind(i))
      }
      t.sent = log.count
    }
    for (const ex of this.#active) {
      let t = this.#tracked.get(ex)
      if (t === undefined) {
        t = { key: this.#nextKey++, sent: 0, id: '', provider: '', model: undefined, status: -1 }
        this.#tracked.set(ex, t)
      }
      if (t.id !== ex.id || t.provider !== ex.provider || t.model !== ex.requestModel || t.status !== ex.statusCode) {
        t.id = ex.id
        t.provider = ex.provider
        t.model = ex.requestModel
        t.status = ex.statusCode
        meta.push({
          key: t.key,
          id: ex.id,
          route: ex.route.label,
          provider: ex.provider,
          model: ex.requestModel,
          tenant: ex.tenant,
          method: ex.method,
          path: ex.path,
          tReq: ex.tReq,
          concurrency: ex.concurrency,
          status: ex.statusCode,
          tHeaders: ex.tHeaders,
        })
      }
      marks(t, ex)
    }
    // An exchange leaves `active` as it is recorded (Exchange#done): it has its measurement.
    for (const [ex, t] of this.#tracked) {
      if (this.#active.has(ex)) continue
      this.#tracked.delete(ex)
      const m = ex.measured
      if (m === undefined) continue
      marks(t, ex)
      ended.push({
        key: t.key,
        tEnd: ex.tReq + m.timing.e2e * 1000,
        status: m.statusCode,
        failure: m.failure,
        cancelled: m.outcome === Outcome.cancelled,
        providerError: m.providerError,
        usage: m.outputSource === TokenSource.usage ? m.outputTokens : undefined,
      })
    }
    const realtime = this.#realtime?.flush()
    if (meta.length === 0 && keys.length === 0 && ended.length === 0 && realtime === undefined) return this.#seq
    this.#send({
      seq: ++this.#seq,
      origin: performance.timeOrigin,
      meta,
      keys: Int32Array.from(keys),
      runs: Uint32Array.from(runs),
      exact: Uint8Array.from(exact),
      at: Float64Array.from(at),
      tokens: Float64Array.from(tokens),
      kinds: Uint8Array.from(kinds),
      ended,
      realtime,
    })
    return this.#seq
  }
}

interface Mirrored {
  meta: StreamMeta
  readonly chunks: ChunkLog
  end?: StreamEnd
  endSeq?: number
}

interface WorkerMirror {
  /** Worker's monotonic ms + shift = the primary's. */
  shift: number
  readonly streams: Map<number, Mirrored>
  readonly ended: Map<number, Mirrored>
}

/** A request the primary records for a worker that exited: who it was and what had been seen of it. */
export interface Orphan {
  readonly meta: StreamMeta
  readonly facts: Omit<ExchangeFacts, 'slo' | 'stallSeconds'>
}

export class ProgressMirror {
  readonly #workers = new Map<number, WorkerMirror>()
  /** The workers' realtime sessions (its `exited` gives what a dead worker left of them). */
  readonly realtime = new RealtimeMirror()
  readonly #origin: number

  constructor(origin = performance.timeOrigin) {
    this.#origin = origin
  }

  /** Requests mirrored (in flight, or ended and not yet covered by a report), for tests and figures. */
  size(workerId: number): number {
    const w = this.#workers.get(workerId)
    return w === undefined ? 0 : w.streams.size + w.ended.size
  }

  onBatch(batch: ProgressBatch, workerId: number): void {
    let w = this.#workers.get(workerId)
    if (w === undefined) {
      w = { shift: 0, streams: new Map(), ended: new Map() }
      this.#workers.set(workerId, w)
    }
    const shift = batch.origin - this.#origin
    w.shift = shift
    if (batch.realtime !== undefined) this.realtime.onBatch(batch.realtime, batch.seq, shift, workerId)
    for (const meta of batch.meta) {
      const shifted = {
        ...meta,
        tReq: meta.tReq + shift,
        tHeaders: meta.tHeaders === undefined ? undefined : meta.tHeaders + shift,
      }
      const s = w.streams.get(meta.key)
      if (s === undefined) w.streams.set(meta.key, { meta: shifted, chunks: new ChunkLog() })
      else s.meta = shifted
    }
    let mark = 0
    for (let r = 0; r < batch.keys.length; r++) {
      const s = w.streams.get(batch.keys[r])
      const exact = batch.exact[r] === 1
      const end = mark + batch.runs[r]
      if (s !== undefined)
        for (let i = mark; i < end; i++)
          s.chunks.add(batch.at[i] + shift, batch.tokens[i], batch.kinds[i] as MarkKind, exact)
      mark = end
    }
    for (const end of batch.ended) {
      const s = w.streams.get(end.key)
      if (s === undefined) continue
      w.streams.delete(end.key)
      s.end = { ...end, tEnd: end.tEnd + shift }
      s.endSeq = batch.seq
      w.ended.set(end.key, s)
      if (w.ended.size > MAX_ENDED) w.ended.delete(w.ended.keys().next().value as number)
    }
  }

  /** A report of this worker counts every request that ended in batches up to `seq`. */
  covered(workerId: number, seq: number): void {
    this.realtime.covered(workerId, seq)
    const w = this.#workers.get(workerId)
    if (w === undefined) return
    for (const [key, s] of w.ended) {
      if ((s.endSeq as number) > seq) break
      w.ended.delete(key)
    }
  }

  /** The worker exited at `now` (the primary's clock): its requests no kept report counts, to record once. */
  exited(workerId: number, now: number): Orphan[] {
    const w = this.#workers.get(workerId)
    this.#workers.delete(workerId)
    if (w === undefined) return []
    const out: Orphan[] = []
    for (const s of w.ended.values()) {
      const e = s.end as StreamEnd
      out.push({
        meta: s.meta,
        facts: {
          tReq: s.meta.tReq,
          tEnd: e.tEnd,
          tHeaders: s.meta.tHeaders,
          statusCode: e.status,
          failure: e.failure,
          clientGone: e.cancelled,
          chunks: s.chunks,
          summary: { error: e.providerError, usage: e.usage === undefined ? undefined : { output: e.usage } },
        },
      })
    }
    for (const s of w.streams.values()) {
      out.push({
        meta: s.meta,
        facts: {
          tReq: s.meta.tReq,
          tEnd: Math.max(now, s.meta.tReq),
          tHeaders: s.meta.tHeaders,
          statusCode: s.meta.status,
          failure: 'TOKENTAP_ERR_WORKER_EXITED',
          clientGone: false,
          chunks: s.chunks,
          summary: {},
        },
      })
    }
    return out
  }
}

/** The primary's own recording of what dead workers left in flight, merged into /metrics with the workers'. */
export class OrphanRecorder {
  readonly metrics: LlmMetrics
  /** The llm_realtime_ families of what dead workers left (the primary holds no session open: its gauge stays 0). */
  readonly realtime: RealtimeMetrics
  readonly #recorder: Recorder
  readonly #policy: RecordPolicy
  readonly #logger: Logger
  readonly #live: LiveStore
  readonly #routes = new Map<string, RouteRuntime>()
  readonly #stallSeconds: number

  constructor(config: Config, logger: Logger, live: LiveStore) {
    const tenant = config.metrics.tenant !== undefined
    const policy = new RecordPolicy({
      maxModelsPerRoute: config.limits.max_models_per_route,
      lengthBandLabel: config.metrics.length_band_label,
      genAi: false,
      tenant,
    })
    this.metrics = new LlmMetrics(config.metrics.buckets, () => {}, {
      stallSeconds: config.metrics.stall_seconds,
      exemplars: config.metrics.exemplars,
      labelNames: policy.labels.names,
      bandedLabelNames: policy.labels.bandedNames,
      native: nativeOptions(config.metrics.native_histograms),
    })
    this.realtime = new RealtimeMetrics(
      config.metrics.buckets,
      () => {},
      policy.labels.names,
      nativeOptions(config.metrics.native_histograms),
    )
    this.#policy = policy
    this.#logger = logger
    this.#live = live
    const metrics = this.metrics
    this.#recorder = new Recorder(
      policy,
      [
        (o) => metrics.record(o),
        requestLog(logger),
        // A request that had ended went to the live page in its worker's live batch already.
        (o) => {
          if (o.measured.failure === 'TOKENTAP_ERR_WORKER_EXITED') live.listener(o)
        },
      ],
      (err, who) => logger.error({ err, route: who.route.label }, 'recording a request failed'),
    )
    this.#stallSeconds = config.metrics.stall_seconds
    for (const r of config.routes) {
      const runtime = proxyRoute(r as Parameters<typeof proxyRoute>[0]).runtime
      this.#routes.set(runtime.label, runtime)
    }
  }

  /** Records each orphan once; `detail` (the exit's signal or code) goes on its log line. */
  record(orphans: readonly Orphan[], detail: string): void {
    for (const { meta, facts } of orphans) {
      const route = this.#routes.get(meta.route) ?? {
        label: meta.route,
        prefix: meta.route,
        provider: 'auto',
        inFlight: 0,
      }
      const m = measure({ ...facts, slo: route.slo, stallSeconds: this.#stallSeconds })
      const who: RequestFacts = {
        id: meta.id,
        route,
        provider: meta.provider,
        tenant: meta.tenant,
        method: meta.method,
        path: meta.path,
        model: meta.model,
        responseModel: undefined,
        usageInjected: false,
        concurrency: meta.concurrency,
        bytesIn: 0,
        bytesOut: 0,
        tReq: meta.tReq,
        overhead: { request: undefined, firstChunk: undefined, chunk: undefined },
        extra: undefined,
        failureDetail: facts.failure === 'TOKENTAP_ERR_WORKER_EXITED' ? detail : undefined,
      }
      try {
        this.#recorder.record(who, m)
      } catch (err) {
        this.#recorder.onRecordError(err, who)
      }
    }
  }

  /**
   * Records a dead worker's realtime work once through the same policy as a worker: what it ended as it ended, each
   * open session as an error with its responses in flight (TOKENTAP_ERR_WORKER_EXITED); a log line and the live page
   * for the cut sessions (the ended ones reached both through their worker).
   */
  recordRealtime(orphans: RealtimeOrphans, now: number, detail: string): void {
    const guarded = (who: SessionMeta, record: () => void): void => {
      try {
        record()
      } catch (err) {
        this.#logger.error({ err, route: who.route }, 'recording a realtime session failed')
      }
    }
    for (const { who, response } of orphans.finished)
      guarded(who, () => this.realtime.response(this.#policy.observeResponse(this.#setOf(who), response)))
    for (const { who, outcome } of orphans.closed) guarded(who, () => this.realtime.session(this.#setOf(who), outcome))
    const listener = this.#live.realtime.listener
    for (const { who: meta, responses } of orphans.open)
      guarded(meta, () => {
        const set = this.#setOf(meta)
        const who = identityOf(meta)
        for (const r of responses) {
          this.realtime.response(this.#policy.observeResponse(set, r))
          listener.response?.(who, set.labels, r)
        }
        const summary: SessionSummary = {
          outcome: Outcome.error,
          statusCode: 101,
          failure: 'TOKENTAP_ERR_WORKER_EXITED',
          duration: Math.max(0, now - meta.tReq) / 1000,
          close: undefined,
          endedBy: undefined,
          bytesFromClient: 0,
          bytesFromUpstream: 0,
          messagesFromClient: 0,
          messagesFromUpstream: 0,
          unread: 0,
          parseError: undefined,
          responses: responses.length,
        }
        this.realtime.session(set, Outcome.error)
        listener.session?.(who, set.labels, summary)
        writeRecordLine(
          this.#logger,
          true,
          'realtime session',
          (o) => ({ ...sessionLogLine(o), error_detail: detail }),
          {
            who,
            labels: set.labels,
            summary,
          },
        )
      })
  }

  #setOf(who: SessionMeta): ReturnType<RecordPolicy['labelSetOf']> {
    return this.#policy.labelSetOf({
      provider: who.provider,
      route: { label: who.route },
      model: who.model,
      tenant: who.tenant,
    })
  }
}

/** A mirrored session as the log line and the live page read one. */
function identityOf(meta: SessionMeta): SessionIdentity {
  return {
    seq: meta.key,
    id: meta.id,
    route: { label: meta.route, prefix: meta.route, provider: 'auto', inFlight: 0 },
    provider: meta.provider,
    tenant: meta.tenant,
    model: meta.model,
    path: meta.path,
    tReq: meta.tReq,
  }
}
