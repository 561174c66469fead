import { MAX_COUNT, isCount, isObject, nonEmpty } from '../parsers/json.ts'
import type { Json } from '../parsers/json.ts'
import { Outcome } from '../timing/measurement.ts'
import { ResponseTimeline } from '../timing/realtime-timing.ts'
import type { RealtimeUsage } from '../timing/realtime-timing.ts'
import { base64Bytes, mimeBytesPerSecond } from './audio-format.ts'
import type { InFlightVisitor, ProtocolContext, RealtimeProtocol } from './protocol.ts'

/**
 * Gemini Live (https://ai.google.dev/api/live): a response is the model's turn, started by the
 * client's turn end; with automatic voice activity detection the server ends the user's turn
 * silently, so such a turn has no TTFT. The last `usageMetadata` of a turn (a later one repeats,
 * not adds) is its usage, so a turn ended without usage waits one message for it.
 * `interrupted` (the user spoke over it) ends a turn as cancelled.
 */

interface Turn {
  readonly timeline: ResponseTimeline
  usage: RealtimeUsage | undefined
  toolCall: boolean
}

export class GeminiLive implements RealtimeProtocol {
  readonly #ctx: ProtocolContext
  #asked: number | undefined
  #turn: Turn | undefined
  #ended: { readonly turn: Turn; readonly outcome: Outcome; readonly at: number } | undefined

  constructor(ctx: ProtocolContext) {
    this.#ctx = ctx
  }

  get inFlight(): number {
    return (this.#turn === undefined ? 0 : 1) + (this.#asked === undefined || this.#turn !== undefined ? 0 : 1)
  }

  forEachInFlight(visit: InFlightVisitor): void {
    // A turn that ended waiting for its usage is not recorded yet either.
    const ended = this.#ended?.turn
    if (ended !== undefined) visit(ended, ended.timeline.start, ended.timeline)
    const turn = this.#turn
    if (turn !== undefined) visit(turn, turn.timeline.start, turn.timeline)
    else if (this.#asked !== undefined) visit(this, this.#asked, undefined)
  }

  client(message: Json, at: number): void {
    const setup = message.setup
    if (isObject(setup) && nonEmpty(setup.model)) this.#ctx.model(modelName(setup.model))
    const content = message.clientContent
    const input = message.realtimeInput
    const asks =
      (isObject(content) && content.turnComplete === true) ||
      (isObject(input) && (isObject(input.activityEnd) || input.audioStreamEnd === true)) ||
      isObject(message.toolResponse)
    if (!asks) return
    this.#settle()
    // A client turn while the model's turn is open: it follows a tool call, or the client spoke over the model.
    const open = this.#turn
    if (open !== undefined) {
      this.#turn = undefined
      this.#finish(open, at, open.toolCall ? Outcome.ok : Outcome.cancelled)
    }
    this.#asked = at
  }

  server(message: Json, at: number): void {
    let usage = usageOf(message.usageMetadata)
    const ended = this.#ended
    if (ended !== undefined) {
      this.#ended = undefined
      // Usage right after the turn's end belongs to it.
      if (usage !== undefined) ended.turn.usage = usage
      usage = undefined
      this.#finish(ended.turn, ended.at, ended.outcome)
    }
    const content = message.serverContent
    if (isObject(content)) this.#content(content, at)
    if (isObject(message.toolCall)) this.#current().toolCall = true
    if (usage !== undefined && this.#turn !== undefined) this.#turn.usage = usage
    if (isObject(content) && (content.turnComplete === true || content.interrupted === true))
      this.#endTurn(content.interrupted === true ? Outcome.cancelled : Outcome.ok, at)
  }

  end(outcome: Outcome, at: number): void {
    this.#settle()
    const open = this.#turn
    this.#turn = undefined
    if (open !== undefined) this.#finish(open, at, outcome)
    const asked = this.#asked
    this.#asked = undefined
    if (asked !== undefined)
      this.#finish({ timeline: new ResponseTimeline(asked), usage: undefined, toolCall: false }, at, outcome)
  }

  #current(): Turn {
    if (this.#turn === undefined) {
      this.#turn = { timeline: new ResponseTimeline(this.#asked), usage: undefined, toolCall: false }
      this.#asked = undefined
    }
    return this.#turn
  }

  #content(content: Json, at: number): void {
    const turn = isObject(content.modelTurn) ? content.modelTurn : undefined
    const parts = turn !== undefined && Array.isArray(turn.parts) ? turn.parts : []
    for (const part of parts) {
      if (!isObject(part)) continue
      if (nonEmpty(part.text) && part.thought !== true)
        this.#current().timeline.text(at, this.#ctx.countTokens(part.text))
      const data = part.inlineData
      if (isObject(data) && nonEmpty(data.data) && typeof data.mimeType === 'string') {
        const rate = mimeBytesPerSecond(data.mimeType)
        if (rate !== undefined) this.#current().timeline.audio(at, base64Bytes(data.data) / rate)
      }
    }
    const transcript = content.outputTranscription
    if (isObject(transcript) && nonEmpty(transcript.text))
      this.#current().timeline.text(at, this.#ctx.countTokens(transcript.text))
  }

  #endTurn(outcome: Outcome, at: number): void {
    const turn = this.#turn
    // `interrupted` then `turnComplete`: the turn already ended.
    if (turn === undefined) return
    this.#turn = undefined
    if (turn.usage !== undefined) this.#finish(turn, at, outcome)
    else this.#ended = { turn, outcome, at }
  }

  #settle(): void {
    const ended = this.#ended
    if (ended === undefined) return
    this.#ended = undefined
    this.#finish(ended.turn, ended.at, ended.outcome)
  }

  #finish(turn: Turn, at: number, outcome: Outcome): void {
    this.#ctx.finished({
      id: undefined,
      start: turn.timeline.start,
      end: at,
      outcome,
      detail: undefined,
      timing: turn.timeline.timing(),
      usage: turn.usage,
    })
  }
}

/** `models/gemini-2.5-flash` (or a Vertex resource name) → `gemini-2.5-flash`, as the HTTP routes label it. */
function modelName(model: string): string {
  const at = model.lastIndexOf('models/')
  return (at < 0 ? model : model.slice(at + 'models/'.length)).slice(0, 200)
}

/** Thinking counts as output text. */
function usageOf(usage: unknown): RealtimeUsage | undefined {
  if (!isObject(usage)) return undefined
  const side = (total: unknown, details: unknown): { text: number; audio: number } => {
    if (!Array.isArray(details) || details.length === 0) return { text: isCount(total) ? total : 0, audio: 0 }
    let text = 0
    let audio = 0
    for (const d of details) {
      if (!isObject(d) || !isCount(d.tokenCount)) continue
      if (d.modality === 'AUDIO') audio += d.tokenCount
      else if (d.modality === 'TEXT') text += d.tokenCount
    }
    // Many details of up to MAX_COUNT each could still add up to a poisonous figure.
    return { text: text <= MAX_COUNT ? text : 0, audio: audio <= MAX_COUNT ? audio : 0 }
  }
  const input = side(usage.promptTokenCount, usage.promptTokensDetails)
  const output = side(usage.responseTokenCount, usage.responseTokensDetails)
  const thoughts = isCount(usage.thoughtsTokenCount) ? usage.thoughtsTokenCount : 0
  return {
    inputText: input.text,
    inputAudio: input.audio,
    outputText: output.text + thoughts,
    outputAudio: output.audio,
  }
}
