import type { FailureCode } from '../errors.ts'
import { HistogramCore } from '../histogram/histogram-core.ts'
import { Outcome } from './measurement.ts'

/**
 * Pure timing core of realtime sessions: a response's arrival marks (ms, monotonic) in, its figures
 * (seconds) out, and how a session ended. Definitions: the CONTRACT's "Realtime sessions", docs/realtime.md.
 */

/** Tokens of one response as the provider reported them, by direction and modality. */
export interface RealtimeUsage {
  readonly inputText: number
  readonly inputAudio: number
  readonly outputText: number
  readonly outputAudio: number
}

/** One response's figures. */
/** A response that ended, with its figures. */
export interface FinishedResponse {
  /** The provider's id (`resp_…`), when it gave one. */
  readonly id: string | undefined
  /** When it was asked for, and when it ended (ms, monotonic). */
  readonly start: number | undefined
  readonly end: number
  readonly outcome: Outcome
  /** The provider's reason, when it gave one (a status detail, an error code); bounded. */
  readonly detail: string | undefined
  /** The proxy's own reason, when the proxy ended it (the worker serving it exited). */
  readonly failure?: FailureCode
  readonly timing: ResponseTiming
  readonly usage: RealtimeUsage | undefined
}

export interface ResponseTiming {
  /** First text, transcript or audio delta − start. */
  readonly ttft: number | undefined
  /** First audio delta − start. */
  readonly ttfa: number | undefined
  /**
   * Token-weighted ITL as llm_inter_token_latency_seconds: delta j ≥ 2 gives weight k_j to gap_j / k_j.
   * Pairs of value and weight: the first EXACT_ITL_GAPS exact, later ones one per histogram bucket.
   */
  readonly itl: readonly (readonly [value: number, weight: number])[]
  /** Audio underrun, seconds (see ResponseTimeline); undefined without audio. */
  readonly underrun: number | undefined
  /** Seconds of audio the response carried. */
  readonly audioSeconds: number
  /** Text and transcript deltas, and their tokens (the tokenizer's count). */
  readonly textDeltas: number
  readonly streamedTokens: number
  readonly audioDeltas: number
}

const S = 1 / 1000

/** The inter-token gaps a response keeps as they were (value and weight, 16 bytes each). */
export const EXACT_ITL_GAPS = 4_096
/**
 * What a timeline has sent of itself to another process (cluster/realtime-progress.ts), kept by the
 * sender: the deltas it had then, the exact gaps sent, and the later gaps' histogram as sent.
 */
export interface TimelineCursor {
  deltas: number
  gaps: number
  more: HistogramCore | undefined
}

/** A new cursor: nothing sent yet. */
export const timelineCursor = (): TimelineCursor => ({ deltas: -1, gaps: 0, more: undefined })

/**
 * A timeline's state past a cursor, bounded by what arrived since: its figures so far and the
 * gaps not sent yet (pairs of value and weight; past EXACT_ITL_GAPS one pair per changed bucket).
 */
export interface TimelineProgress {
  readonly start: number | undefined
  readonly firstText: number | undefined
  readonly lastText: number
  readonly textDeltas: number
  readonly tokens: number
  readonly firstAudio: number | undefined
  readonly audioDeltas: number
  readonly audioSeconds: number
  readonly playedTo: number
  readonly silent: number
  readonly gaps: Float64Array
}

/** Later gaps go into a bounded histogram at the live page's resolution (schema 6). */
export const ITL_SCHEMA = 6
const ITL_BUCKETS = 4_096

/**
 * One response's marks folded in bounded memory, since a session may stream for an hour; every gap counts.
 * Audio underrun: a listener plays each delta after the previous one; the underrun is the time its queue
 * was empty before a later delta came. Nothing after the last delta counts.
 */
export class ResponseTimeline {
  /** When the response was asked for (the client's `response.create`, the server's `input_audio_buffer.committed`, the client's turn end); undefined when unknown. */
  readonly start: number | undefined
  #firstText: number | undefined
  #lastText = 0
  #textDeltas = 0
  #tokens = 0
  /** The first gaps: value, weight, … (grown by doubling up to EXACT_ITL_GAPS pairs). */
  #exact = new Float64Array(32)
  #exactCount = 0
  /** The gaps past the first EXACT_ITL_GAPS. */
  #more: HistogramCore | undefined
  #firstAudio: number | undefined
  #audioDeltas = 0
  #audioSeconds = 0
  /** When the queued audio runs out (ms). */
  #playedTo = 0
  #silent = 0

  constructor(start: number | undefined) {
    this.start = start
  }

  /** A text or transcript delta of `tokens` tokens arrived at `at`. */
  text(at: number, tokens: number): void {
    if (this.#textDeltas === 0) this.#firstText = at
    else if (tokens > 0) this.#gap(((at - this.#lastText) * S) / tokens, tokens)
    this.#textDeltas++
    this.#tokens += tokens
    this.#lastText = at
  }

  #gap(value: number, weight: number): void {
    const n = this.#exactCount
    if (n < EXACT_ITL_GAPS) {
      if (2 * n === this.#exact.length) {
        const grown = new Float64Array(this.#exact.length * 2)
        grown.set(this.#exact)
        this.#exact = grown
      }
      this.#exact[2 * n] = value
      this.#exact[2 * n + 1] = weight
      this.#exactCount = n + 1
      return
    }
    this.#more ??= new HistogramCore({ schema: ITL_SCHEMA, maxBuckets: ITL_BUCKETS })
    this.#more.observe(value, weight)
  }

  /** The ITL pairs: the exact gaps, then one per bucket of the later ones. */
  #itl(): [number, number][] {
    const pairs: [number, number][] = []
    for (let i = 0; i < this.#exactCount; i++) pairs.push([this.#exact[2 * i], this.#exact[2 * i + 1]])
    const more = this.#more
    if (more !== undefined) {
      if (more.zeroCount > 0) pairs.push([0, more.zeroCount])
      more.forEachBucket((index, weight) => pairs.push([more.representative(index), weight]))
    }
    return pairs
  }

  /** An audio delta carrying `seconds` of audio arrived at `at`. */
  audio(at: number, seconds: number): void {
    if (this.#audioDeltas === 0) {
      this.#firstAudio = at
      this.#playedTo = at
    } else if (at > this.#playedTo) {
      this.#silent += at - this.#playedTo
      this.#playedTo = at
    }
    this.#playedTo += seconds * 1000
    this.#audioSeconds += seconds
    this.#audioDeltas++
  }

  /** What changed since `cursor` (which moves past it), undefined when nothing did: a mirror `apply`s it. */
  progress(cursor: TimelineCursor): TimelineProgress | undefined {
    const deltas = this.#textDeltas + this.#audioDeltas
    if (deltas === cursor.deltas) return undefined
    cursor.deltas = deltas
    const pairs: number[] = []
    for (let i = cursor.gaps; i < this.#exactCount; i++) pairs.push(this.#exact[2 * i], this.#exact[2 * i + 1])
    cursor.gaps = this.#exactCount
    const more = this.#more
    if (more !== undefined && more.count !== (cursor.more?.count ?? 0)) {
      const sent = new HistogramCore({ schema: ITL_SCHEMA, maxBuckets: ITL_BUCKETS })
      sent.merge(more)
      const fresh = new HistogramCore({ schema: ITL_SCHEMA, maxBuckets: ITL_BUCKETS })
      fresh.merge(more)
      if (cursor.more !== undefined) fresh.subtract(cursor.more)
      if (fresh.zeroCount > 0) pairs.push(0, fresh.zeroCount)
      fresh.forEachBucket((index, weight) => {
        if (weight > 0) pairs.push(fresh.representative(index), weight)
      })
      cursor.more = sent
    }
    return {
      start: this.start,
      firstText: this.#firstText,
      lastText: this.#lastText,
      textDeltas: this.#textDeltas,
      tokens: this.#tokens,
      firstAudio: this.#firstAudio,
      audioDeltas: this.#audioDeltas,
      audioSeconds: this.#audioSeconds,
      playedTo: this.#playedTo,
      silent: this.#silent,
      gaps: Float64Array.from(pairs),
    }
  }

  /** A mirror's (made with the sender's start + `shift`): takes another process's progress, its times + `shift` (ms). */
  apply(p: TimelineProgress, shift: number): void {
    const at = (t: number | undefined): number | undefined => (t === undefined ? undefined : t + shift)
    this.#firstText = at(p.firstText)
    this.#lastText = p.textDeltas === 0 ? 0 : p.lastText + shift
    this.#textDeltas = p.textDeltas
    this.#tokens = p.tokens
    this.#firstAudio = at(p.firstAudio)
    this.#audioDeltas = p.audioDeltas
    this.#audioSeconds = p.audioSeconds
    this.#playedTo = p.audioDeltas === 0 ? 0 : p.playedTo + shift
    this.#silent = p.silent
    for (let i = 0; i + 1 < p.gaps.length; i += 2) this.#gap(p.gaps[i], p.gaps[i + 1])
  }

  /** Whether any text, transcript or audio delta arrived. */
  get produced(): boolean {
    return this.#textDeltas > 0 || this.#audioDeltas > 0
  }

  timing(): ResponseTiming {
    const t = this.#firstText
    const a = this.#firstAudio
    const first = t === undefined ? a : a === undefined ? t : Math.min(t, a)
    const since = (at: number | undefined): number | undefined =>
      at === undefined || this.start === undefined ? undefined : Math.max(0, at - this.start) * S
    return {
      ttft: since(first),
      ttfa: since(a),
      itl: this.#itl(),
      underrun: a === undefined ? undefined : this.#silent * S,
      audioSeconds: this.#audioSeconds,
      textDeltas: this.#textDeltas,
      streamedTokens: this.#tokens,
      audioDeltas: this.#audioDeltas,
    }
  }
}

/** What the relay and the measuring side saw of a session's end. */
export interface SessionEndFacts {
  /** The upstream refused or failed the upgrade (no 101). */
  readonly refused: boolean
  /** The side whose connection went first, or `proxy` (a timeout, shutting down). */
  readonly first: 'client' | 'upstream' | 'proxy'
  /** That connection was reset or failed rather than closed with a FIN. */
  readonly abrupt: boolean
  /** Why the proxy ended it, when it did: a timeout, or shutting down (then it closed with 1001, going away). */
  readonly proxyReason?: 'idle' | 'total' | 'shutdown'
  /** The first close frame of the session: who sent it and its code (undefined: no code in it). */
  readonly firstClose: { readonly from: 'client' | 'upstream'; readonly code: number | undefined } | undefined
}

/**
 * Close codes that mean failure: 1002-1015 (RFC 6455 §7.4.1 and the IANA registry); 1000, 1001, no code
 * and application codes (3000-4999) end a session normally.
 */
const failedClose = (code: number | undefined): boolean => code !== undefined && code >= 1002 && code <= 1015

/**
 * How a session ended: `ok` after a close handshake whose code is no failure (a shutdown's 1001 too),
 * `cancelled` when the client left without a close frame, else `error`.
 */
export function sessionOutcome(f: SessionEndFacts): Outcome {
  if (f.refused) return Outcome.error
  if (f.first === 'proxy' && f.firstClose === undefined)
    return f.proxyReason === 'shutdown' ? Outcome.ok : Outcome.error
  if (f.firstClose !== undefined) return failedClose(f.firstClose.code) ? Outcome.error : Outcome.ok
  if (f.first === 'client') return Outcome.cancelled
  return Outcome.error
}
