import { isCount, isObject, nonEmpty } from '../parsers/json.ts'
import type { Json } from '../parsers/json.ts'
import { Outcome } from '../timing/measurement.ts'
import { ResponseTimeline } from '../timing/realtime-timing.ts'
import type { RealtimeUsage } from '../timing/realtime-timing.ts'
import { DEFAULT_BYTES_PER_SECOND, base64Bytes, openAIBytesPerSecond } from './audio-format.ts'
import { detailOf } from './protocol.ts'
import type { InFlightVisitor, ProtocolContext, RealtimeProtocol } from './protocol.ts'

/**
 * OpenAI Realtime and Azure's, GA and beta event names
 * (https://platform.openai.com/docs/api-reference/realtime-server-events). A response starts at the
 * client's `response.create` or, with server voice activity detection, at
 * `input_audio_buffer.committed`; `response.created` takes the oldest unanswered create, else the
 * latest commit. A create the server refused with an `error` event is an errored response.
 */

const TEXT_DELTAS = new Set([
  'response.output_text.delta',
  'response.text.delta',
  'response.output_audio_transcript.delta',
  'response.audio_transcript.delta',
])
const AUDIO_DELTAS = new Set(['response.output_audio.delta', 'response.audio.delta'])

/** A client asking for responses it never gets cannot grow these. */
const MAX_PENDING = 64
const MAX_OPEN = 64

interface Asked {
  readonly at: number
  readonly eventId: string | undefined
}

interface Open {
  readonly timeline: ResponseTimeline
  cancelRequested: boolean
}

export class OpenAIRealtime implements RealtimeProtocol {
  readonly #ctx: ProtocolContext
  readonly #asked: Asked[] = []
  #committed: number | undefined
  readonly #open = new Map<string, Open>()
  #bytesPerSecond = DEFAULT_BYTES_PER_SECOND

  constructor(ctx: ProtocolContext) {
    this.#ctx = ctx
  }

  get inFlight(): number {
    return this.#asked.length + this.#open.size
  }

  forEachInFlight(visit: InFlightVisitor): void {
    for (const open of this.#open.values()) visit(open, open.timeline.start, open.timeline)
    for (const asked of this.#asked) visit(asked, asked.at, undefined)
  }

  client(message: Json, at: number): void {
    const type = message.type
    if (type === 'response.create') {
      if (this.#asked.length < MAX_PENDING)
        this.#asked.push({ at, eventId: typeof message.event_id === 'string' ? message.event_id : undefined })
    } else if (type === 'response.cancel') {
      const id = message.response_id
      if (typeof id === 'string') {
        const open = this.#open.get(id)
        if (open !== undefined) open.cancelRequested = true
      } else for (const open of this.#open.values()) open.cancelRequested = true
    }
  }

  server(message: Json, at: number): void {
    const type = message.type
    if (typeof type !== 'string') return
    if (TEXT_DELTAS.has(type)) {
      if (nonEmpty(message.delta))
        this.#response(message.response_id).timeline.text(at, this.#ctx.countTokens(message.delta))
    } else if (AUDIO_DELTAS.has(type)) {
      if (nonEmpty(message.delta))
        this.#response(message.response_id).timeline.audio(at, base64Bytes(message.delta) / this.#bytesPerSecond)
    } else if (type === 'response.created') {
      const response = message.response
      if (isObject(response) && typeof response.id === 'string') this.#created(response.id)
    } else if (type === 'response.done') {
      this.#done(message.response, at)
    } else if (type === 'input_audio_buffer.committed') {
      this.#committed = at
    } else if (type === 'session.created' || type === 'session.updated') {
      this.#session(message.session)
    } else if (type === 'error') {
      this.#error(message.error, at)
    }
  }

  end(outcome: Outcome, at: number): void {
    // A response the client asked to cancel is cancelled, whoever closed the session.
    for (const [id, open] of this.#open)
      this.#finish(id, open.timeline, at, open.cancelRequested ? Outcome.cancelled : outcome, undefined, undefined)
    this.#open.clear()
    for (const asked of this.#asked.splice(0))
      this.#finish(undefined, new ResponseTimeline(asked.at), at, outcome, undefined, undefined)
  }

  #session(session: unknown): void {
    if (!isObject(session)) return
    if (nonEmpty(session.model)) this.#ctx.model(session.model)
    // GA: session.audio.output.format; beta: session.output_audio_format.
    const audio =
      isObject(session.audio) && isObject(session.audio.output)
        ? session.audio.output.format
        : session.output_audio_format
    const rate = openAIBytesPerSecond(audio)
    if (rate !== undefined) this.#bytesPerSecond = rate
  }

  #created(id: string): void {
    if (this.#open.has(id)) return
    const asked = this.#asked.shift()
    // Neither asked for nor committed as far as the proxy saw: no TTFT.
    this.#openResponse(id, asked?.at ?? this.#committed)
    this.#committed = undefined
  }

  #openResponse(id: string, start: number | undefined): Open {
    const open: Open = { timeline: new ResponseTimeline(start), cancelRequested: false }
    if (this.#open.size < MAX_OPEN) this.#open.set(id, open)
    return open
  }

  /** Opens one without a start when `response.created` was not seen. */
  #response(id: unknown): Open {
    const key = typeof id === 'string' ? id : ''
    return this.#open.get(key) ?? this.#openResponse(key, undefined)
  }

  #done(response: unknown, at: number): void {
    if (!isObject(response)) return
    const id = typeof response.id === 'string' ? response.id : ''
    const open = this.#open.get(id)
    this.#open.delete(id)
    const status = response.status
    const outcome = status === 'failed' ? Outcome.error : status === 'cancelled' ? Outcome.cancelled : Outcome.ok
    const details = isObject(response.status_details) ? response.status_details : undefined
    const detail =
      details === undefined
        ? undefined
        : (detailOf(details.reason) ?? (isObject(details.error) ? detailOf(details.error.code) : undefined))
    this.#finish(
      id === '' ? undefined : id,
      open?.timeline ?? new ResponseTimeline(undefined),
      at,
      outcome,
      detail,
      usageOf(response.usage),
    )
  }

  #error(error: unknown, at: number): void {
    if (!isObject(error) || this.#asked.length === 0) return
    let index = typeof error.event_id === 'string' ? this.#asked.findIndex((a) => a.eventId === error.event_id) : -1
    // A response.create sent while another response was active: the newest one asked for.
    if (index < 0 && error.code === 'conversation_already_has_active_response') index = this.#asked.length - 1
    if (index < 0) return
    const [asked] = this.#asked.splice(index, 1)
    this.#finish(undefined, new ResponseTimeline(asked.at), at, Outcome.error, detailOf(error.code), undefined)
  }

  #finish(
    id: string | undefined,
    timeline: ResponseTimeline,
    at: number,
    outcome: Outcome,
    detail: string | undefined,
    usage: RealtimeUsage | undefined,
  ): void {
    this.#ctx.finished({
      id: id === '' ? undefined : id,
      start: timeline.start,
      end: at,
      outcome,
      detail,
      timing: timeline.timing(),
      usage,
    })
  }
}

/** Without details, all of a direction counts as text. */
function usageOf(usage: unknown): RealtimeUsage | undefined {
  if (!isObject(usage)) return undefined
  const side = (total: unknown, details: unknown): { text: number; audio: number } => {
    const d = isObject(details) ? details : {}
    const text = isCount(d.text_tokens) ? d.text_tokens : undefined
    const audio = isCount(d.audio_tokens) ? d.audio_tokens : undefined
    if (text !== undefined || audio !== undefined) return { text: text ?? 0, audio: audio ?? 0 }
    return { text: isCount(total) ? total : 0, audio: 0 }
  }
  const input = side(usage.input_tokens, usage.input_token_details)
  const output = side(usage.output_tokens, usage.output_token_details)
  return { inputText: input.text, inputAudio: input.audio, outputText: output.text, outputAudio: output.audio }
}
