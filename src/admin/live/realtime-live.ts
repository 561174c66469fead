import type { SeriesLabels as Labels } from '../../record/observations.ts'
import type { FinishedResponse } from '../../realtime/protocol.ts'
import type { RealtimeListener } from '../../realtime/realtime.ts'
import type { SessionIdentity, SessionSummary } from '../../realtime/session.ts'
import { SlidingCounter, SlidingSketch } from './sliding-sketch.ts'
import type { RealtimeMessage } from './live-message-types.ts'

/**
 * The live views of realtime sessions: sliding windows and sketches per route and model, the open
 * sessions, and the last finished ones for `/debug/requests/{id}`; figures only, bounded.
 */

const MAX_SERIES = 200
const MAX_SHOWN = 40
const MAX_OPEN_SHOWN = 48
/** A session keeps its last this many responses for /debug/requests (and counts them all). */
const RESPONSES_KEPT = 50
/** More than this much silence in a response is the alert's "breaks up". */
const UNDERRUN_NOTICEABLE = 0.25
const QS = [0.5, 0.95, 0.99] as const

/** What the live page reads of an open session (a RealtimeSession has it all). */
export interface OpenSession {
  readonly id: string
  readonly route: { readonly label: string }
  readonly provider: string
  readonly model: string | undefined
  readonly tReq: number
  readonly responsesInFlight: number
}

class RealtimeSeries {
  readonly sessions = new SlidingCounter()
  readonly responses = { ok: new SlidingCounter(), error: new SlidingCounter(), cancelled: new SlidingCounter() }
  readonly sketches = {
    ttft: new SlidingSketch(),
    ttfa: new SlidingSketch(),
    itl: new SlidingSketch(),
    underrun: new SlidingSketch(),
  }
  /** Responses with audio, and those with more than UNDERRUN_NOTICEABLE of silence. */
  readonly audio = new SlidingCounter()
  readonly noticeable = new SlidingCounter()
  lastAt = 0

  constructor(
    readonly route: string,
    readonly model: string,
    readonly provider: string,
  ) {}
}

interface ResponseView {
  readonly response_id: string | null
  readonly outcome: string
  readonly detail: string | null
  /** ms from the session's upgrade request. */
  readonly started_ms: number | null
  readonly ended_ms: number
  readonly ttft_ms: number | null
  readonly ttfa_ms: number | null
  readonly itl_mean_ms: number | null
  readonly underrun_ms: number | null
  readonly audio_ms: number
  readonly text_deltas: number
  readonly audio_deltas: number
  readonly streamed_tokens: number
  readonly usage: { input_text: number; input_audio: number; output_text: number; output_audio: number } | null
}

const ms = (seconds: number | undefined): number | null =>
  seconds === undefined ? null : Math.round(seconds * 1e6) / 1e3
const micros = (seconds: number): number | null => (Number.isNaN(seconds) ? null : Math.round(seconds * 1e6))

function responseView(who: SessionIdentity, r: FinishedResponse): ResponseView {
  const t = r.timing
  let itlSum = 0
  let itlCount = 0
  for (const [v, w] of t.itl) {
    itlSum += v * w
    itlCount += w
  }
  return {
    response_id: r.id ?? null,
    outcome: r.outcome,
    detail: r.detail ?? null,
    started_ms: r.start === undefined ? null : Math.round((r.start - who.tReq) * 1e3) / 1e3,
    ended_ms: Math.round((r.end - who.tReq) * 1e3) / 1e3,
    ttft_ms: ms(t.ttft),
    ttfa_ms: ms(t.ttfa),
    itl_mean_ms: itlCount === 0 ? null : ms(itlSum / itlCount),
    underrun_ms: ms(t.underrun),
    audio_ms: Math.round(t.audioSeconds * 1e6) / 1e3,
    text_deltas: t.textDeltas,
    audio_deltas: t.audioDeltas,
    streamed_tokens: t.streamedTokens,
    usage:
      r.usage === undefined
        ? null
        : {
            input_text: r.usage.inputText,
            input_audio: r.usage.inputAudio,
            output_text: r.usage.outputText,
            output_audio: r.usage.outputAudio,
          },
  }
}

export class RealtimeLive {
  readonly series = new Map<string, RealtimeSeries>()
  /** Responses of sessions still open, by session seq. */
  readonly #pending = new Map<number, { responses: ResponseView[]; count: number }>()
  /** Finished sessions, oldest first, by id (a reused id finds its latest session). */
  readonly #recent = new Map<string, Record<string, unknown>>()
  readonly #capacity: number
  readonly #open: Iterable<OpenSession>

  /** `recent`: finished sessions kept for /debug/requests/{id}; `open`: the sessions open now. */
  constructor(recent: number, open: Iterable<OpenSession>) {
    this.#capacity = recent
    this.#open = open
  }

  #seriesOf(l: Labels, now: number): RealtimeSeries | undefined {
    const key = `${l.route}\u0000${l.model}`
    let s = this.series.get(key)
    if (s === undefined) {
      if (this.series.size >= MAX_SERIES) return undefined
      s = new RealtimeSeries(l.route, l.model, l.provider)
      this.series.set(key, s)
    }
    s.lastAt = now
    return s
  }

  readonly listener: RealtimeListener = {
    response: (who, l, r) => {
      const now = r.end
      const s = this.#seriesOf(l, now)
      if (s !== undefined) {
        s.responses[r.outcome].add(1, now)
        const t = r.timing
        if (t.ttft !== undefined) s.sketches.ttft.observe(t.ttft, 1, now)
        if (t.ttfa !== undefined) s.sketches.ttfa.observe(t.ttfa, 1, now)
        for (const [v, w] of t.itl) s.sketches.itl.observe(v, w, now)
        if (t.underrun !== undefined) {
          s.sketches.underrun.observe(t.underrun, 1, now)
          s.audio.add(1, now)
          if (t.underrun > UNDERRUN_NOTICEABLE) s.noticeable.add(1, now)
        }
      }
      if (this.#capacity === 0) return
      let kept = this.#pending.get(who.seq)
      if (kept === undefined) {
        kept = { responses: [], count: 0 }
        this.#pending.set(who.seq, kept)
      }
      kept.count++
      kept.responses.push(responseView(who, r))
      if (kept.responses.length > RESPONSES_KEPT) kept.responses.shift()
    },
    session: (who, l, summary) => {
      const now = who.tReq + summary.duration * 1000
      this.#seriesOf(l, now)?.sessions.add(1, now)
      const kept = this.#pending.get(who.seq)
      this.#pending.delete(who.seq)
      if (this.#capacity === 0) return
      this.#recent.delete(who.id)
      this.#recent.set(who.id, this.#sessionView(who, l, summary, now, kept))
      if (this.#recent.size > this.#capacity) this.#recent.delete(this.#recent.keys().next().value as string)
    },
  }

  #sessionView(
    who: SessionIdentity,
    l: Labels,
    s: SessionSummary,
    endedAt: number,
    kept: { responses: ResponseView[]; count: number } | undefined,
  ): Record<string, unknown> {
    return {
      request_id: who.id,
      kind: 'realtime_session',
      route: l.route,
      provider: l.provider,
      model: l.model,
      path: who.path.length > 256 ? `${who.path.slice(0, 256)}…` : who.path,
      status: s.statusCode,
      outcome: s.outcome,
      error: s.failure ?? null,
      duration_ms: Math.round(s.duration * 1e6) / 1e3,
      close_code: s.close?.code ?? null,
      close_reason: s.close?.reason ?? null,
      closed_by: s.close?.from ?? null,
      ended_by: s.endedBy ?? null,
      bytes_from_client: s.bytesFromClient,
      bytes_from_upstream: s.bytesFromUpstream,
      messages_from_client: s.messagesFromClient,
      messages_from_upstream: s.messagesFromUpstream,
      unread_messages: s.unread,
      parse_error: s.parseError ?? null,
      response_count: s.responses,
      responses: kept?.responses ?? [],
      endedAt,
    }
  }

  /** A finished session's figures and its last responses, for `/debug/requests/{id}`; undefined when not kept. */
  sessionView(id: string, now: number, wallNow: number): Record<string, unknown> | undefined {
    const found = this.#recent.get(id)
    if (found === undefined) return undefined
    const { endedAt, ...view } = found
    return { ...view, ended_at: new Date(wallNow - (now - (endedAt as number))).toISOString() }
  }

  /** The live page's realtime part: the open sessions (oldest first) and the busiest series, every figure in µs. */
  message(now: number): RealtimeMessage {
    const sessions: RealtimeMessage['sessions'] = []
    let openCount = 0
    for (const s of this.#open) {
      openCount++
      if (sessions.length < MAX_OPEN_SHOWN)
        sessions.push({
          id: s.id,
          route: s.route.label,
          provider: s.provider,
          model: s.model ?? null,
          age: Math.round((now - s.tReq) * 1000),
          responses: s.responsesInFlight,
        })
    }
    const windows = [0, 1, 2]
    const ranked = [...this.series.values()]
      .filter((s) => now - s.lastAt < 15 * 60_000)
      .sort((a, b) => b.lastAt - a.lastAt)
    const series = ranked.slice(0, MAX_SHOWN).map((s) => {
      const counts = (c: SlidingCounter): number[] => windows.map((w) => c.sum(w, now))
      const q = (sketch: SlidingSketch): (number | null)[] =>
        windows.flatMap((w) => {
          const values = sketch.quantiles(w, QS, now)
          return [...values.map(micros), Math.round(sketch.count(w, now))]
        })
      return {
        route: s.route,
        model: s.model,
        provider: s.provider,
        sessions: counts(s.sessions),
        ok: counts(s.responses.ok),
        error: counts(s.responses.error),
        cancelled: counts(s.responses.cancelled),
        audio: counts(s.audio),
        noticeable: counts(s.noticeable),
        q: {
          ttft: q(s.sketches.ttft),
          ttfa: q(s.sketches.ttfa),
          itl: q(s.sketches.itl),
          underrun: q(s.sketches.underrun),
        },
      }
    })
    return { open: openCount, sessions, series }
  }
}
