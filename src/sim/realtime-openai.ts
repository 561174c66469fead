import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { SimulatorConfig } from '../config/schema.ts'
import { isObject } from '../parsers/json.ts'
import type { Json } from '../parsers/json.ts'
import { PCM16_BYTES_PER_MS, playRealtime, realtimePlanFor, silenceBase64 } from './realtime-player.ts'
import type { Playing, RealtimeFormat, RealtimePlanRequest } from './realtime-player.ts'
import { acceptWebSocket } from './websocket.ts'
import type { SimSocket } from './websocket.ts'

/**
 * A simulated OpenAI Realtime session (GA event names, the beta's with `OpenAI-Beta: realtime=v1`); a commit
 * starts a response when the session has `turn_detection`, as voice activity detection would. Usage is the
 * simulator's convention: a word is a token, an audio token 50 ms out or 100 ms in, input text 4 chars a token.
 */

interface Names {
  readonly text: string
  readonly audio: string
  readonly transcript: string
  readonly textDone: string
  readonly audioDone: string
  readonly transcriptDone: string
}

const GA: Names = {
  text: 'response.output_text.delta',
  audio: 'response.output_audio.delta',
  transcript: 'response.output_audio_transcript.delta',
  textDone: 'response.output_text.done',
  audioDone: 'response.output_audio.done',
  transcriptDone: 'response.output_audio_transcript.done',
}
const BETA: Names = {
  text: 'response.text.delta',
  audio: 'response.audio.delta',
  transcript: 'response.audio_transcript.delta',
  textDone: 'response.text.done',
  audioDone: 'response.audio.done',
  transcriptDone: 'response.audio_transcript.done',
}

/** The plan a header (`x-tokentap-sim`) or an event field (`tokentap_sim`) asks for, if it is one. */
export function planRequestOf(value: unknown): RealtimePlanRequest | undefined {
  if (isObject(value)) return value as RealtimePlanRequest
  if (typeof value !== 'string') return undefined
  try {
    const parsed = JSON.parse(value) as unknown
    return isObject(parsed) ? (parsed as RealtimePlanRequest) : undefined
  } catch {
    return undefined
  }
}

class OpenAISession {
  readonly #cfg: SimulatorConfig
  readonly #names: Names
  readonly #beta: boolean
  readonly #plan: RealtimePlanRequest | undefined
  readonly #nextSeq: () => number
  #socket: SimSocket | undefined
  #ids = 0
  readonly #session: Json
  #audioInMs = 0
  #textInChars = 0
  readonly #playing = new Map<string, Playing>()

  constructor(cfg: SimulatorConfig, req: IncomingMessage, nextSeq: () => number) {
    this.#cfg = cfg
    this.#beta = /realtime=v1/i.test(String(req.headers['openai-beta'] ?? ''))
    this.#names = this.#beta ? BETA : GA
    this.#plan = planRequestOf(req.headers['x-tokentap-sim'])
    this.#nextSeq = nextSeq
    const model = new URL(req.url ?? '/', 'http://sim').searchParams.get('model') ?? cfg.model
    this.#session = this.#beta
      ? {
          id: 'sess_sim',
          object: 'realtime.session',
          model,
          modalities: ['text', 'audio'],
          output_audio_format: 'pcm16',
          turn_detection: null,
        }
      : {
          type: 'realtime',
          id: 'sess_sim',
          object: 'realtime.session',
          model,
          output_modalities: ['audio'],
          audio: { output: { format: { type: 'audio/pcm', rate: 24000 } }, input: { turn_detection: null } },
        }
  }

  attach(socket: SimSocket): void {
    this.#socket = socket
    this.#send({ type: 'session.created', session: this.#session })
  }

  #id(kind: string): string {
    return `${kind}_sim${++this.#ids}`
  }

  #send(event: Json): boolean {
    return this.#socket?.send(JSON.stringify({ event_id: this.#id('event'), ...event })) ?? true
  }

  message(text: string): void {
    let event: unknown
    try {
      event = JSON.parse(text)
    } catch {
      this.#send({
        type: 'error',
        error: {
          type: 'invalid_request_error',
          code: 'invalid_json',
          message: 'The event is not valid JSON.',
          param: null,
          event_id: null,
        },
      })
      return
    }
    if (!isObject(event)) return
    const type = event.type
    if (type === 'session.update' && isObject(event.session)) {
      Object.assign(this.#session, event.session)
      this.#send({ type: 'session.updated', session: this.#session })
    } else if (type === 'input_audio_buffer.append' && typeof event.audio === 'string') {
      this.#audioInMs += (event.audio.length * 3) / 4 / PCM16_BYTES_PER_MS
    } else if (type === 'input_audio_buffer.commit') {
      this.#send({ type: 'input_audio_buffer.committed', previous_item_id: null, item_id: this.#id('item') })
      if (this.#turnDetection()) this.#respond(undefined)
    } else if (type === 'conversation.item.create') {
      this.#textInChars += JSON.stringify(event.item ?? '').length
      this.#send({
        type: 'conversation.item.created',
        previous_item_id: null,
        item: { id: this.#id('item'), ...(isObject(event.item) ? event.item : {}) },
      })
    } else if (type === 'response.create') {
      const response = isObject(event.response) ? event.response : {}
      if (this.#playing.size > 0 && response.conversation !== 'none') {
        this.#send({
          type: 'error',
          error: {
            type: 'invalid_request_error',
            code: 'conversation_already_has_active_response',
            message: 'Conversation already has an active response in progress.',
            param: null,
            event_id: event.event_id ?? null,
          },
        })
        return
      }
      this.#respond(event)
    } else if (type === 'response.cancel') {
      const id = typeof event.response_id === 'string' ? event.response_id : [...this.#playing.keys()][0]
      if (id !== undefined) this.#playing.get(id)?.stop()
    }
  }

  closed(): void {
    for (const p of this.#playing.values()) p.stop()
  }

  #turnDetection(): boolean {
    const s = this.#session
    const detection = this.#beta
      ? s.turn_detection
      : isObject(s.audio) && isObject(s.audio.input)
        ? s.audio.input.turn_detection
        : undefined
    return isObject(detection)
  }

  #respond(create: Json | undefined): void {
    const socket = this.#socket
    if (socket === undefined) return
    const options = isObject(create?.response) ? create.response : {}
    const modalities = (
      this.#beta
        ? (options.modalities ?? this.#session.modalities)
        : (options.output_modalities ?? this.#session.output_modalities)
    ) as unknown
    const audio = Array.isArray(modalities) && modalities.includes('audio')
    const plan = realtimePlanFor(this.#cfg, planRequestOf(create?.tokentap_sim) ?? this.#plan, this.#nextSeq(), audio)
    const id = this.#id('resp')
    const item = this.#id('item')
    const names = this.#names
    const where = { response_id: id, item_id: item, output_index: 0, content_index: 0 }
    let words = 0
    let audioMs = 0
    let text = ''
    this.#send({
      type: 'response.created',
      response: { object: 'realtime.response', id, status: 'in_progress', output: [], usage: null },
    })
    this.#send({
      type: 'response.output_item.added',
      response_id: id,
      output_index: 0,
      item: {
        id: item,
        object: 'realtime.item',
        type: 'message',
        role: 'assistant',
        status: 'in_progress',
        content: [],
      },
    })
    this.#send({
      type: 'response.content_part.added',
      ...where,
      part: audio ? { type: 'audio', transcript: '' } : { type: 'text', text: '' },
    })
    const event = (e: Json): string => JSON.stringify({ event_id: this.#id('event'), ...e })
    const done = (status: string, extra: Json = {}): string =>
      event({
        type: 'response.done',
        response: {
          object: 'realtime.response',
          id,
          status,
          status_details: null,
          output: [
            {
              id: item,
              object: 'realtime.item',
              type: 'message',
              role: 'assistant',
              status: status === 'completed' ? 'completed' : 'incomplete',
              content: [],
            },
          ],
          usage: this.#usage(words, audioMs),
          ...extra,
        },
      })
    const format: RealtimeFormat = {
      binary: false,
      step: (_i, t, audioBytes) => {
        words += t.split(' ').length - 1
        text += t
        if (!audio) return [event({ type: names.text, ...where, delta: t })]
        audioMs += audioBytes / PCM16_BYTES_PER_MS
        return [
          event({ type: names.audio, ...where, delta: silenceBase64(audioBytes) }),
          event({ type: names.transcript, ...where, delta: t }),
        ]
      },
      done: () => [
        ...(audio
          ? [
              event({ type: names.audioDone, ...where }),
              event({ type: names.transcriptDone, ...where, transcript: text }),
            ]
          : [event({ type: names.textDone, ...where, text })]),
        event({
          type: 'response.output_item.done',
          response_id: id,
          output_index: 0,
          item: {
            id: item,
            object: 'realtime.item',
            type: 'message',
            role: 'assistant',
            status: 'completed',
            content: [],
          },
        }),
        done('completed'),
      ],
      error: () => [
        event({
          type: 'error',
          error: {
            type: 'server_error',
            code: 'sim_error',
            message: 'simulated error inside the response',
            param: null,
            event_id: null,
          },
        }),
        done('failed', { status_details: { type: 'failed', error: { type: 'server_error', code: 'sim_error' } } }),
      ],
    }
    let over = false
    const playing = playRealtime(socket, plan, format, audio, (how) => {
      over = true
      this.#playing.delete(id)
      if (how === 'stopped' && !socket.gone)
        socket.send(done('cancelled', { status_details: { type: 'cancelled', reason: 'client_cancelled' } }))
    })
    if (!over) this.#playing.set(id, playing)
  }

  #usage(words: number, audioMs: number): Json {
    const inputAudio = Math.round(this.#audioInMs / 100)
    const inputText = Math.max(1, Math.ceil(this.#textInChars / 4))
    const outputAudio = Math.round(audioMs / 50)
    return {
      total_tokens: inputText + inputAudio + words + outputAudio,
      input_tokens: inputText + inputAudio,
      output_tokens: words + outputAudio,
      input_token_details: { text_tokens: inputText, audio_tokens: inputAudio, cached_tokens: 0 },
      output_token_details: { text_tokens: words, audio_tokens: outputAudio },
    }
  }
}

/** Answers an upgrade to `/v1/realtime` with a simulated OpenAI Realtime session. */
export function serveOpenAIRealtime(
  cfg: SimulatorConfig,
  req: IncomingMessage,
  socket: Duplex,
  nextSeq: () => number,
): void {
  const session = new OpenAISession(cfg, req, nextSeq)
  const sim = acceptWebSocket(req, socket, { message: (text) => session.message(text), closed: () => session.closed() })
  if (sim !== undefined) session.attach(sim)
}
