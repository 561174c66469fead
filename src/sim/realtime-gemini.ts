import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { SimulatorConfig } from '../config/schema.ts'
import { isObject } from '../parsers/json.ts'
import type { Json } from '../parsers/json.ts'
import { PCM16_BYTES_PER_MS, playRealtime, realtimePlanFor, silenceBase64 } from './realtime-player.ts'
import type { Playing, RealtimeFormat, RealtimePlanRequest } from './realtime-player.ts'
import { planRequestOf } from './realtime-openai.ts'
import { acceptWebSocket } from './websocket.ts'
import type { SimSocket } from './websocket.ts'

/**
 * A simulated Gemini Live session (BidiGenerateContent): the client's turn end starts the model's turn,
 * played by realtime-player.ts in binary frames as Gemini sends them; a client turn meanwhile interrupts it.
 */

class GeminiSession {
  readonly #cfg: SimulatorConfig
  readonly #plan: RealtimePlanRequest | undefined
  readonly #nextSeq: () => number
  #socket: SimSocket | undefined
  #audio = true
  #transcribe = false
  #promptChars = 0
  #playing: Playing | undefined
  #turns = 0

  constructor(cfg: SimulatorConfig, req: IncomingMessage, nextSeq: () => number) {
    this.#cfg = cfg
    this.#plan = planRequestOf(req.headers['x-tokentap-sim'])
    this.#nextSeq = nextSeq
  }

  attach(socket: SimSocket): void {
    this.#socket = socket
  }

  #send(message: Json): boolean {
    return this.#socket?.send(JSON.stringify(message), true) ?? true
  }

  message(text: string): void {
    let message: unknown
    try {
      message = JSON.parse(text)
    } catch {
      this.#socket?.close(1007, 'Request contains an invalid argument.')
      return
    }
    if (!isObject(message)) return
    const setup = message.setup
    if (isObject(setup)) {
      const generation = isObject(setup.generationConfig) ? setup.generationConfig : {}
      const modalities = generation.responseModalities
      this.#audio = !Array.isArray(modalities) || modalities.includes('AUDIO')
      this.#transcribe = isObject(setup.outputAudioTranscription)
      this.#send({ setupComplete: {} })
      return
    }
    const content = message.clientContent
    const input = message.realtimeInput
    if (isObject(content)) this.#promptChars += JSON.stringify(content.turns ?? '').length
    const turnEnd =
      (isObject(content) && content.turnComplete === true) ||
      (isObject(input) && (isObject(input.activityEnd) || input.audioStreamEnd === true)) ||
      isObject(message.toolResponse)
    if (turnEnd) this.#turn(planRequestOf((message as Json).tokentap_sim))
  }

  closed(): void {
    this.#playing?.stop()
  }

  #turn(request: RealtimePlanRequest | undefined): void {
    const socket = this.#socket
    if (socket === undefined) return
    if (this.#playing !== undefined) {
      this.#playing.stop()
      this.#send({ serverContent: { interrupted: true } })
    }
    const audio = this.#audio
    const plan = realtimePlanFor(this.#cfg, request ?? this.#plan, this.#nextSeq(), audio)
    let words = 0
    let audioMs = 0
    const json = (m: Json): string => JSON.stringify(m)
    const format: RealtimeFormat = {
      binary: true,
      step: (_i, text, audioBytes) => {
        words += text.split(' ').length - 1
        if (!audio) return [json({ serverContent: { modelTurn: { parts: [{ text }] } } })]
        audioMs += audioBytes / PCM16_BYTES_PER_MS
        const out = [
          json({
            serverContent: {
              modelTurn: {
                parts: [{ inlineData: { mimeType: 'audio/pcm;rate=24000', data: silenceBase64(audioBytes) } }],
              },
            },
          }),
        ]
        if (this.#transcribe) out.push(json({ serverContent: { outputTranscription: { text } } }))
        return out
      },
      done: () => {
        const prompt = Math.max(1, Math.ceil(this.#promptChars / 4))
        // Gemini counts 32 tokens a second of audio.
        const response = audio ? Math.round((audioMs * 32) / 1000) : words
        return [
          json({ serverContent: { generationComplete: true } }),
          json({
            serverContent: { turnComplete: true },
            usageMetadata: {
              promptTokenCount: prompt,
              responseTokenCount: response,
              totalTokenCount: prompt + response,
              promptTokensDetails: [{ modality: 'TEXT', tokenCount: prompt }],
              responseTokensDetails: [{ modality: audio ? 'AUDIO' : 'TEXT', tokenCount: response }],
            },
          }),
        ]
      },
      // Gemini Live reports a failure by closing the connection with its reason.
      error: () => [],
    }
    const turn = ++this.#turns
    let over = false
    const playing = playRealtime(socket, plan, format, audio, (how) => {
      over = true
      if (this.#turns === turn) this.#playing = undefined
      if (how === 'error') socket.close(1011, 'Internal error encountered.')
    })
    if (!over) this.#playing = playing
  }
}

/** Answers an upgrade to Gemini Live's BidiGenerateContent path with a simulated session. */
export function serveGeminiLive(
  cfg: SimulatorConfig,
  req: IncomingMessage,
  socket: Duplex,
  nextSeq: () => number,
): void {
  const session = new GeminiSession(cfg, req, nextSeq)
  const sim = acceptWebSocket(req, socket, { message: (text) => session.message(text), closed: () => session.closed() })
  if (sim !== undefined) session.attach(sim)
}
