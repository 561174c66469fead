import { performance } from 'node:perf_hooks'
import type { FinishedRequest } from '../admin/live/finished-request.ts'
import type { InFlight } from '../admin/live/live-message.ts'
import { LiveStore } from '../admin/live/live-store.ts'
import type { OpenSession } from '../admin/live/realtime-live.ts'
import type { StreamsSnapshot } from '../admin/debug-streams.ts'
import type { FinishedResponse } from '../realtime/protocol.ts'
import type { SessionIdentity, SessionSummary } from '../realtime/session.ts'
import type { Exchange } from '../proxy/exchange.ts'
import type { RealtimeListener } from '../realtime/realtime.ts'
import { ChunkLog } from '../timing/chunk-log.ts'
import type { MarkKind } from '../timing/chunk-log.ts'
import type { SeriesLabels } from '../record/observations.ts'

/**
 * The live views with `server.workers` > 1: the primary builds its own LiveStore from the workers'
 * batches, so its live page shows what one process would; /debug/streams and /debug/requests/{id}
 * ask the workers. Times cross processes as monotonic ms plus `performance.timeOrigin`.
 */

/** A finished request's batch and realtime events, worker → primary. */
export interface LiveBatch {
  /** The sender's performance.timeOrigin: its monotonic times plus this are wall-clock ms. */
  readonly origin: number
  readonly requests: readonly FinishedRequest[]
  readonly realtime: readonly RealtimeEvent[]
}

interface WireIdentity {
  readonly seq: number
  readonly id: string
  readonly route: { readonly label: string }
  readonly provider: string
  readonly model: string | undefined
  readonly path: string
  readonly tReq: number
}

type RealtimeEvent =
  | {
      readonly kind: 'response'
      readonly who: WireIdentity
      readonly labels: SeriesLabels
      readonly response: FinishedResponse
    }
  | {
      readonly kind: 'session'
      readonly who: WireIdentity
      readonly labels: SeriesLabels
      readonly summary: SessionSummary
    }

/** One stream in flight as the worker last sent it: its new chunks only. */
interface StreamDelta {
  readonly key: number
  readonly id: string
  readonly route: string
  readonly provider: string
  readonly model: string | undefined
  readonly tReq: number
  /** Chunk index of the first mark sent here (the primary has the ones before). */
  readonly from: number
  readonly at: Float64Array
  readonly tokens: Float64Array
  readonly kinds: Uint8Array
  readonly exact: boolean
}

/** A worker's streams in flight (the oldest MAX_STREAMS) and open realtime sessions. */
export interface InFlightDelta {
  readonly origin: number
  readonly total: number
  readonly streams: readonly StreamDelta[]
  readonly sessions: readonly OpenSession[]
  readonly sessionsOpen: number
}

/** As many streams as the live page shows (live-message.ts MAX_STREAMS_SHOWN) are mirrored a worker. */
const MAX_STREAMS = 48
/** Finished requests are sent at most this often (a live page updates once a second). */
const FLUSH_MS = 100
/** A batch this large is sent at once. */
const FLUSH_AT = 512

const wireIdentity = (who: SessionIdentity): WireIdentity => ({
  seq: who.seq,
  id: who.id,
  route: { label: who.route.label },
  provider: who.provider,
  model: who.model,
  path: who.path,
  tReq: who.tReq,
})

/** Worker side: batches what feeds its LiveStore for the primary on a timer, so sending never blocks the byte path. */
export class WorkerViews {
  readonly #send: (batch: LiveBatch) => void
  #requests: FinishedRequest[] = []
  #realtime: RealtimeEvent[] = []
  #timer: NodeJS.Timeout | undefined
  /** Per exchange: its key and how many of its chunks the primary has. */
  readonly #sent = new WeakMap<object, { key: number; next: number }>()
  #nextKey = 0

  constructor(send: (batch: LiveBatch) => void) {
    this.#send = send
  }

  /** For Recorder#listen (through LiveStore's mapping). */
  readonly finished = (r: FinishedRequest): void => {
    // The runs only (their arrays are sized for every chunk): the clone copies whole buffers.
    const g = r.gaps
    const gaps =
      g.count === g.seconds.length
        ? g
        : {
            count: g.count,
            seconds: g.seconds.slice(0, g.count),
            tokens: g.tokens.slice(0, g.count),
            times: g.times.slice(0, g.count),
          }
    this.#requests.push(gaps === g ? r : { ...r, gaps })
    this.#schedule()
  }

  readonly realtime: RealtimeListener = {
    response: (who, labels, response) => {
      this.#realtime.push({ kind: 'response', who: wireIdentity(who), labels: { ...labels }, response })
      this.#schedule()
    },
    session: (who, labels, summary) => {
      this.#realtime.push({ kind: 'session', who: wireIdentity(who), labels: { ...labels }, summary })
      this.#schedule()
    },
  }

  #schedule(): void {
    if (this.#requests.length + this.#realtime.length >= FLUSH_AT) this.flush()
    else this.#timer ??= setTimeout(() => this.flush(), FLUSH_MS).unref()
  }

  flush(): void {
    clearTimeout(this.#timer)
    this.#timer = undefined
    if (this.#requests.length === 0 && this.#realtime.length === 0) return
    const batch: LiveBatch = { origin: performance.timeOrigin, requests: this.#requests, realtime: this.#realtime }
    this.#requests = []
    this.#realtime = []
    this.#send(batch)
  }

  /** The streams in flight (the oldest) with the chunks not yet sent, and the open realtime sessions. */
  inFlight(active: ReadonlySet<Exchange>, open: Iterable<OpenSession>): InFlightDelta {
    const streams: StreamDelta[] = []
    for (const ex of active) {
      if (streams.length >= MAX_STREAMS) break
      let sent = this.#sent.get(ex)
      if (sent === undefined) {
        sent = { key: this.#nextKey++, next: 0 }
        this.#sent.set(ex, sent)
      }
      const log = ex.chunks
      const from = sent.next
      const n = log.count - from
      const at = new Float64Array(Math.max(0, n))
      const tokens = new Float64Array(Math.max(0, n))
      const kinds = new Uint8Array(Math.max(0, n))
      for (let i = 0; i < n; i++) {
        at[i] = log.at(from + i)
        tokens[i] = log.tokens(from + i)
        kinds[i] = log.kind(from + i)
      }
      sent.next = log.count
      streams.push({
        key: sent.key,
        id: ex.id,
        route: ex.route.label,
        provider: ex.provider,
        model: ex.requestModel,
        tReq: ex.tReq,
        from,
        at,
        tokens,
        kinds,
        exact: log.allExact,
      })
    }
    const sessions: OpenSession[] = []
    let sessionsOpen = 0
    for (const s of open) {
      if (sessionsOpen++ < MAX_STREAMS)
        sessions.push({
          id: s.id,
          route: { label: s.route.label },
          provider: s.provider,
          model: s.model,
          tReq: s.tReq,
          responsesInFlight: s.responsesInFlight,
        })
    }
    return { origin: performance.timeOrigin, total: active.size, streams, sessions, sessionsOpen }
  }
}

/** The workers' /debug/streams snapshots as one: the oldest first, at most `limit`. */
export function mergeStreams(snapshots: readonly StreamsSnapshot[], limit = 1000): StreamsSnapshot {
  const all = snapshots.flatMap((s) => s.streams)
  all.sort((a, b) => b.age_ms - a.age_ms)
  const streams = all.slice(0, limit)
  const inFlight = snapshots.reduce((n, s) => n + s.in_flight, 0)
  return { in_flight: inFlight, shown: streams.length, omitted: inFlight - streams.length, streams }
}

class MirrorStream implements InFlight {
  readonly chunks = new ChunkLog()
  constructor(
    readonly id: string,
    readonly route: { readonly label: string },
    readonly provider: string,
    readonly requestModel: string | undefined,
    readonly tReq: number,
  ) {}
}

/** Primary side: a LiveStore fed by the workers' batches, and a mirror of their streams in flight for the live page. */
export class ClusterViews {
  readonly live: LiveStore
  /** The mirrored streams of every worker (the live message's `active`). */
  readonly active = new Set<InFlight>()
  readonly #streams = new Map<number, Map<number, MirrorStream>>()
  readonly #sessions = new Map<number, readonly OpenSession[]>()
  readonly #totals = new Map<number, number>()
  readonly #origin: number

  constructor(options: { readonly stallSeconds: number; readonly origin?: number; readonly startedAt?: number }) {
    this.#origin = options.origin ?? performance.timeOrigin
    const sessions = this.#sessions
    // The lookups of /debug/requests ask the workers, which keep the requests: none kept here.
    this.live = new LiveStore({
      recentRequests: 0,
      stallSeconds: options.stallSeconds,
      startedAt: options.startedAt,
      realtimeOpen: {
        *[Symbol.iterator]() {
          for (const list of sessions.values()) yield* list
        },
      },
    })
  }

  /** Requests in flight in all workers (more than the mirrored ones when many run). */
  get inFlight(): number {
    let n = 0
    for (const t of this.#totals.values()) n += t
    return n
  }

  onMessage(batch: LiveBatch, workerId: number): void {
    const shift = batch.origin - this.#origin
    for (const r of batch.requests) this.live.add({ ...r, endedAt: r.endedAt + shift })
    // Sessions are numbered per process: a worker's own range keeps them apart.
    const seq = (n: number): number => workerId * 2 ** 32 + n
    const listener = this.live.realtime.listener
    for (const e of batch.realtime) {
      const who = { ...e.who, seq: seq(e.who.seq), tReq: e.who.tReq + shift } as unknown as SessionIdentity
      if (e.kind === 'response') {
        const r = e.response
        listener.response?.(who, e.labels, {
          ...r,
          start: r.start === undefined ? undefined : r.start + shift,
          end: r.end + shift,
        })
      } else listener.session?.(who, e.labels, e.summary)
    }
  }

  /** A worker's streams in flight now: new ones mirrored, new chunks added, ended ones dropped. */
  onInFlight(delta: InFlightDelta, workerId: number): void {
    const shift = delta.origin - this.#origin
    const old = this.#streams.get(workerId) ?? new Map<number, MirrorStream>()
    const now = new Map<number, MirrorStream>()
    for (const d of delta.streams) {
      let s = old.get(d.key)
      if (s === undefined) {
        // A stream first seen here has all its chunks in the delta (from 0).
        s = new MirrorStream(d.id, { label: d.route }, d.provider, d.model, d.tReq + shift)
        this.active.add(s)
      }
      for (let i = 0; i < d.at.length; i++) s.chunks.add(d.at[i] + shift, d.tokens[i], d.kinds[i] as MarkKind, d.exact)
      now.set(d.key, s)
    }
    for (const [key, s] of old) if (!now.has(key)) this.active.delete(s)
    this.#streams.set(workerId, now)
    this.#totals.set(workerId, delta.total)
    this.#sessions.set(
      workerId,
      delta.sessions.map((s) => ({ ...s, tReq: s.tReq + shift })),
    )
  }

  /** No live page is open: the mirror stops being refreshed, so it is emptied rather than left stale. */
  clearInFlight(): void {
    for (const id of [...this.#streams.keys(), ...this.#totals.keys()]) this.workerGone(id)
  }

  /** A worker exited: its streams and sessions are no longer in flight. */
  workerGone(workerId: number): void {
    for (const s of this.#streams.get(workerId)?.values() ?? []) this.active.delete(s)
    this.#streams.delete(workerId)
    this.#sessions.delete(workerId)
    this.#totals.delete(workerId)
  }
}
