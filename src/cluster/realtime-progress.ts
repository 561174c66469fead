import { Outcome } from '../timing/measurement.ts'
import { ResponseTimeline, timelineCursor } from '../timing/realtime-timing.ts'
import type { FinishedResponse, TimelineCursor, TimelineProgress } from '../timing/realtime-timing.ts'
import type { InFlightVisitor } from '../realtime/protocol.ts'
import type { RealtimeListener } from '../realtime/realtime.ts'
import type { SessionIdentity } from '../realtime/session.ts'

/**
 * A dead worker's realtime sessions still count, as its requests do (progress.ts): in the same
 * batches, from the same timer, a worker sends each open session's identity and each response in
 * flight's timeline as it grew since the last batch (bounded: new gaps only, past
 * EXACT_ITL_GAPS one pair per changed bucket), and the sessions and responses it recorded. When it
 * exits, the primary records each response in flight as TOKENTAP_ERR_WORKER_EXITED with the
 * figures mirrored, each open session as an error, and what ended after the last applied report
 * as it ended.
 */

/** Ended sessions and responses kept per worker until a report covers them: the oldest go first. */
const MAX_ENDED = 10_000

/** Who a session is, as the primary records it (labels, log line); sent when first seen and when it changes. */
export interface SessionMeta {
  /** The session's `seq` in its worker. */
  readonly key: number
  readonly id: string
  readonly route: string
  readonly provider: string
  readonly model: string | undefined
  readonly tenant: string | undefined
  readonly path: string
  readonly tReq: number
}

interface ResponseProgress {
  readonly key: number
  readonly session: number
  readonly timeline: TimelineProgress
}

/** What the worker's sessions did since its last batch. */
export interface RealtimeBatch {
  readonly sessions: readonly SessionMeta[]
  readonly responses: readonly ResponseProgress[]
  /** Responses no longer in flight (recorded: see `finished`). */
  readonly gone: Int32Array
  /** Responses the worker recorded, and sessions it recorded (then no longer open). */
  readonly finished: readonly { readonly who: SessionMeta; readonly response: FinishedResponse }[]
  readonly closed: readonly { readonly who: SessionMeta; readonly outcome: Outcome }[]
}

/** What a worker's realtime measuring offers: its open sessions, and a listener for what it records. */
export interface RealtimeSource {
  readonly open: Iterable<{
    readonly seq: number
    readonly id: string
    readonly route: { readonly label: string }
    readonly provider: string
    readonly model: string | undefined
    readonly tenant: string | undefined
    readonly tReq: number
    readonly path: string
    forEachResponseInFlight(visit: InFlightVisitor): void
  }>
  listen(listener: RealtimeListener): void
}

const metaOf = (who: SessionIdentity): SessionMeta => ({
  key: who.seq,
  id: who.id,
  route: who.route.label,
  provider: who.provider,
  model: who.model,
  tenant: who.tenant,
  path: who.path,
  tReq: who.tReq,
})

interface TrackedSession {
  provider: string
  model: string | undefined
  /** The flush that last saw it open. */
  seen: number
}

interface TrackedResponse {
  readonly key: number
  readonly start: number | undefined
  readonly cursor: TimelineCursor
  seen: number
}

/** Worker side. `flush` runs from the progress timer (and before a metrics answer), never on the byte path. */
export class WorkerRealtimeProgress {
  readonly #source: RealtimeSource
  readonly #sessions = new Map<number, TrackedSession>()
  readonly #responses = new Map<object, TrackedResponse>()
  #finished: { who: SessionMeta; response: FinishedResponse }[] = []
  #closed: { who: SessionMeta; outcome: Outcome }[] = []
  #nextKey = 0
  #flushes = 0

  constructor(source: RealtimeSource) {
    this.#source = source
    // Recorded in the turn the session's bytes were measured: kept by reference until the next flush.
    source.listen({
      response: (who, _labels, response) => {
        this.#finished.push({ who: metaOf(who), response })
        if (this.#finished.length > MAX_ENDED) this.#finished.shift()
      },
      session: (who, _labels, summary) => {
        this.#closed.push({ who: metaOf(who), outcome: summary.outcome })
        if (this.#closed.length > MAX_ENDED) this.#closed.shift()
      },
    })
  }

  /** What changed since the last call, undefined when nothing did. */
  flush(): RealtimeBatch | undefined {
    const flush = ++this.#flushes
    const sessions: SessionMeta[] = []
    const responses: ResponseProgress[] = []
    const gone: number[] = []
    for (const s of this.#source.open) {
      let t = this.#sessions.get(s.seq)
      if (t === undefined || t.provider !== s.provider || t.model !== s.model) {
        t = { provider: s.provider, model: s.model, seen: flush }
        this.#sessions.set(s.seq, t)
        sessions.push({
          key: s.seq,
          id: s.id,
          route: s.route.label,
          provider: s.provider,
          model: s.model,
          tenant: s.tenant,
          path: s.path,
          tReq: s.tReq,
        })
      }
      t.seen = flush
      s.forEachResponseInFlight((ref, start, timeline) => {
        let r = this.#responses.get(ref)
        // A protocol may reuse its object for the next response asked for (Gemini's one pending turn): a new start is a new response.
        if (r !== undefined && r.start !== start) {
          gone.push(r.key)
          r = undefined
        }
        if (r === undefined) {
          r = { key: this.#nextKey++, start, cursor: timelineCursor(), seen: flush }
          this.#responses.set(ref, r)
        }
        r.seen = flush
        let progress = timeline?.progress(r.cursor)
        if (timeline === undefined && r.cursor.deltas < 0) {
          // Asked for and not begun: its start only, sent once.
          r.cursor.deltas = 0
          progress = new ResponseTimeline(start).progress(timelineCursor())
        }
        if (progress !== undefined) responses.push({ key: r.key, session: s.seq, timeline: progress })
      })
    }
    for (const [ref, r] of this.#responses)
      if (r.seen !== flush) {
        this.#responses.delete(ref)
        gone.push(r.key)
      }
    for (const [seq, t] of this.#sessions) if (t.seen !== flush) this.#sessions.delete(seq)
    const finished = this.#finished
    const closed = this.#closed
    if (sessions.length + responses.length + gone.length + finished.length + closed.length === 0) return undefined
    this.#finished = []
    this.#closed = []
    return { sessions, responses, gone: Int32Array.from(gone), finished, closed }
  }
}

interface MirroredSession {
  meta: SessionMeta
  readonly responses: Map<number, ResponseTimeline>
}

interface Ended {
  readonly seq: number
  readonly who: SessionMeta
  readonly response?: FinishedResponse
  readonly outcome?: Outcome
}

interface WorkerMirror {
  readonly sessions: Map<number, MirroredSession>
  /** Response key → its session's key. */
  readonly sessionOf: Map<number, number>
  readonly ended: Ended[]
}

/** A dead worker's realtime work no kept report counts: sessions open with their responses in flight, and what ended since. */
export interface RealtimeOrphans {
  readonly open: readonly {
    readonly who: SessionMeta
    /** Their figures up to the last batch, each ended at the death as an error. */
    readonly responses: readonly FinishedResponse[]
  }[]
  readonly finished: readonly { readonly who: SessionMeta; readonly response: FinishedResponse }[]
  readonly closed: readonly { readonly who: SessionMeta; readonly outcome: Outcome }[]
}

/** Primary side: each worker's open sessions and what they ended, until a report covers it. */
export class RealtimeMirror {
  readonly #workers = new Map<number, WorkerMirror>()

  /** Sessions mirrored open, and ended ones not yet covered, for tests and figures. */
  size(workerId: number): { readonly open: number; readonly responses: number; readonly ended: number } {
    const w = this.#workers.get(workerId)
    return { open: w?.sessions.size ?? 0, responses: w?.sessionOf.size ?? 0, ended: w?.ended.length ?? 0 }
  }

  /** `shift`: the worker's monotonic ms + shift = the primary's. */
  onBatch(batch: RealtimeBatch, seq: number, shift: number, workerId: number): void {
    let w = this.#workers.get(workerId)
    if (w === undefined) {
      w = { sessions: new Map(), sessionOf: new Map(), ended: [] }
      this.#workers.set(workerId, w)
    }
    const shifted = (m: SessionMeta): SessionMeta => ({ ...m, tReq: m.tReq + shift })
    for (const meta of batch.sessions) {
      const s = w.sessions.get(meta.key)
      if (s === undefined) w.sessions.set(meta.key, { meta: shifted(meta), responses: new Map() })
      else s.meta = shifted(meta)
    }
    for (const r of batch.responses) {
      const s = w.sessions.get(r.session)
      if (s === undefined) continue
      let timeline = s.responses.get(r.key)
      if (timeline === undefined) {
        const start = r.timeline.start
        timeline = new ResponseTimeline(start === undefined ? undefined : start + shift)
        s.responses.set(r.key, timeline)
        w.sessionOf.set(r.key, r.session)
      }
      timeline.apply(r.timeline, shift)
    }
    for (const key of batch.gone) {
      const session = w.sessionOf.get(key)
      w.sessionOf.delete(key)
      if (session !== undefined) w.sessions.get(session)?.responses.delete(key)
    }
    for (const f of batch.finished) {
      const r = f.response
      w.ended.push({
        seq,
        who: shifted(f.who),
        response: { ...r, start: r.start === undefined ? undefined : r.start + shift, end: r.end + shift },
      })
    }
    for (const c of batch.closed) {
      w.ended.push({ seq, who: shifted(c.who), outcome: c.outcome })
      const s = w.sessions.get(c.who.key)
      w.sessions.delete(c.who.key)
      if (s !== undefined) for (const key of s.responses.keys()) w.sessionOf.delete(key)
    }
    if (w.ended.length > MAX_ENDED) w.ended.splice(0, w.ended.length - MAX_ENDED)
  }

  /** A report of this worker counts everything it recorded in batches up to `seq`. */
  covered(workerId: number, seq: number): void {
    const w = this.#workers.get(workerId)
    if (w === undefined) return
    let n = 0
    while (n < w.ended.length && w.ended[n].seq <= seq) n++
    w.ended.splice(0, n)
  }

  /** The worker exited at `now` (the primary's clock): what no kept report counts, to record once. */
  exited(workerId: number, now: number, failure: FinishedResponse['failure']): RealtimeOrphans {
    const w = this.#workers.get(workerId)
    this.#workers.delete(workerId)
    if (w === undefined) return { open: [], finished: [], closed: [] }
    const finished: { who: SessionMeta; response: FinishedResponse }[] = []
    const closed: { who: SessionMeta; outcome: Outcome }[] = []
    for (const e of w.ended) {
      if (e.response !== undefined) finished.push({ who: e.who, response: e.response })
      else closed.push({ who: e.who, outcome: e.outcome as Outcome })
    }
    const open = [...w.sessions.values()].map((s) => ({
      who: s.meta,
      responses: [...s.responses.values()].map(
        (timeline): FinishedResponse => ({
          id: undefined,
          start: timeline.start,
          end: Math.max(now, s.meta.tReq),
          outcome: Outcome.error,
          detail: undefined,
          failure,
          timing: timeline.timing(),
          usage: undefined,
        }),
      ),
    }))
    return { open, finished, closed }
  }
}
