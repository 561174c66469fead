import { HistogramCore } from '../metrics/core/histogram-core.ts'
import { Outcome } from './measurement.ts'

/**
 * Pure timing core of realtime sessions (OpenAI Realtime, Gemini Live): one response's arrival
 * marks in, its figures out; and how a session ended, from what the relay saw. Times are ms on
 * the proxy's monotonic clock; results are seconds. Definitions: the CONTRACT's "Realtime
 * sessions" and docs/realtime.md.
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
  readonly timing: ResponseTiming
  readonly usage: RealtimeUsage | undefined
}

export interface ResponseTiming {
  /** First text, transcript or audio delta − start. */
  readonly ttft: number | undefined
  /** First audio delta − start. */
  readonly ttfa: number | undefined
  /**
   * Inter-token latency, token-weighted as llm_inter_token_latency_seconds: each text/transcript
   * delta j ≥ 2 with k_j tokens gives k_j observations of gap_j / k_j (pairs of value and weight).
   * Every gap counts: the first EXACT_ITL_GAPS as they were, later ones as the buckets of a
   * histogram at ITL_SCHEMA (a pair per bucket: its representative value and its weight).
   */
  readonly itl: readonly (readonly [value: number, weight: number])[]
  /** Seconds of silence a listener who starts playing at the first audio delta hears before the last one; undefined without audio. */
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
 * Later gaps go into a histogram of bounded size: at schema 6 a value is kept within 0.55 % (the
 * live page's resolution), lowered past ITL_BUCKETS buckets (a range of gaps over 2^16).
 */
export const ITL_SCHEMA = 6
const ITL_BUCKETS = 4_096

/**
 * One response's arrival marks, folded in as they come, in bounded memory (a session may stream
 * audio for an hour, or text deltas by the hundred thousand): every gap counts.
 *
 * Audio underrun: a listener starts playing at the first audio delta and plays each delta when
 * the one before it has played; the underrun is the total time its queue was empty before a
 * later delta came (audio arriving slower than it plays). Nothing after the last delta counts.
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

  /** Whether any text, transcript or audio delta arrived. */
  get produced(): boolean {
    return this.#textDeltas > 0 || this.#audioDeltas > 0
  }

  timing(): ResponseTiming {
    const t = this.#firstText
    const a = this.#firstAudio
    const first = t === undefined ? a : a === undefined ? t : Math.min(t, a)
    const since = (at: number | undefined): number | undefined => (at === undefined || this.start === undefined ? undefined : Math.max(0, at - this.start) * S)
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
 * Close codes that say something went wrong: the protocol's own failure codes, 1002 to 1015
 * (protocol error, unsupported data, invalid payload, policy, too big, extension, internal
 * error, restart, try again later, bad gateway, TLS; RFC 6455 §7.4.1 and the IANA registry).
 * 1000 (normal), 1001 (going away), a close without a code, and the application's own codes
 * (3000–4999) end a session normally.
 */
const failedClose = (code: number | undefined): boolean => code !== undefined && code >= 1002 && code <= 1015

/**
 * How a session ended: `ok` when it was closed by a close handshake whose code does not say it
 * failed, `error` when the upgrade was refused or failed, a close code said something went wrong, the upstream
 * went away without a close frame, or a timeout of the proxy ended it; `cancelled` when the client
 * went away without a close frame. A session the proxy closed as it shut down (1001) is `ok`.
 */
export function sessionOutcome(f: SessionEndFacts): Outcome {
  if (f.refused) return Outcome.error
  if (f.first === 'proxy' && f.firstClose === undefined) return f.proxyReason === 'shutdown' ? Outcome.ok : Outcome.error
  if (f.firstClose !== undefined) return failedClose(f.firstClose.code) ? Outcome.error : Outcome.ok
  if (f.first === 'client') return Outcome.cancelled
  return Outcome.error
}
