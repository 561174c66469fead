import { monotonicNow } from '../clock.ts'
import type { SimulatorConfig } from '../config/schema.ts'
import { createRng } from './rng.ts'
import { chunkText } from './schedule.ts'
import type { SimPlanRequest } from './schedule.ts'
import type { SimSocket } from './websocket.ts'

/**
 * When a simulated realtime response sends what: steps of words (and audio), the first after the TTFT,
 * later audio steps after their audio ÷ `audio_pace` (below 1 a listener runs dry), text after the ITL.
 */

export interface RealtimePlanRequest extends SimPlanRequest {
  /** Audio each token's step carries (ms). */
  audio_ms_per_token?: number
  /** Close the connection with 1011 after this many steps (a server that fails mid-response). */
  close_after?: number
}

interface Step {
  readonly afterMs: number
  readonly tokens: number
}

export interface RealtimePlan {
  readonly steps: readonly Step[]
  readonly audioMsPerToken: number
  readonly errorAfter?: number
  readonly closeAfter?: number
}

const clampInt = (v: unknown, lo: number, hi: number, fallback: number): number =>
  typeof v === 'number' && Number.isFinite(v) ? Math.min(hi, Math.max(lo, Math.round(v))) : fallback
const clampMs = (v: unknown, fallback: number): number =>
  typeof v === 'number' && Number.isFinite(v) ? Math.min(600_000, Math.max(0, v)) : fallback

export function realtimePlanFor(
  cfg: SimulatorConfig,
  request: RealtimePlanRequest | undefined,
  seq: number,
  audio: boolean,
): RealtimePlan {
  const audioMsPerToken = clampMs(request?.audio_ms_per_token, cfg.audio_ms_per_token)
  const extra = {
    audioMsPerToken,
    errorAfter: request?.error_after === undefined ? undefined : clampInt(request.error_after, 0, 1e6, 0),
    closeAfter: request?.close_after === undefined ? undefined : clampInt(request.close_after, 0, 1e6, 0),
  }
  if (request?.chunks !== undefined && Array.isArray(request.chunks)) {
    const steps: Step[] = [
      { afterMs: clampMs(request.ttft_ms, cfg.ttft_ms), tokens: clampInt(request.first_tokens, 1, 10_000, 1) },
    ]
    for (const pair of request.chunks.slice(0, 100_000))
      if (Array.isArray(pair))
        steps.push({ afterMs: clampMs(pair[0], cfg.itl_ms), tokens: clampInt(pair[1], 1, 10_000, 1) })
    return { steps, ...extra }
  }
  const rng = createRng((request?.seed ?? cfg.seed) + seq * 7919)
  const total = cfg.tokens
  const steps: Step[] = []
  for (let sent = 0, i = 0; sent < total; i++) {
    const tokens = Math.min(total - sent, cfg.tokens_per_chunk)
    const jitter = (rng() * 2 - 1) * cfg.jitter_ms
    let afterMs: number
    if (i === 0) afterMs = cfg.ttft_ms + jitter
    else if (cfg.stall_probability > 0 && rng() < cfg.stall_probability) afterMs = cfg.stall_ms
    else afterMs = (audio ? (tokens * audioMsPerToken) / cfg.audio_pace : cfg.itl_ms * tokens) + jitter
    steps.push({ afterMs: Math.max(0, afterMs), tokens })
    sent += tokens
  }
  return { steps, ...extra }
}

/** What a protocol sends for a response, step by step (each call returns the messages to send). */
export interface RealtimeFormat {
  /** Step `index` with its `text` and, for audio, `audioBytes` of PCM16. */
  step(index: number, text: string, audioBytes: number): readonly string[]
  /** After the last step. */
  done(): readonly string[]
  /** The plan's `error_after`: a provider error; the response ends after it. */
  error(): readonly string[]
  /** Messages go as binary frames (Gemini Live's way) instead of text ones. */
  readonly binary: boolean
}

/** PCM16 mono at 24 kHz: 48 bytes a millisecond. */
export const PCM16_BYTES_PER_MS = 48

/** Silence of `bytes` bytes, base64 (zero bytes are `A`s), without building the bytes. */
export function silenceBase64(bytes: number): string {
  const whole = Math.floor(bytes / 3)
  const rest = bytes % 3
  return 'AAAA'.repeat(whole) + (rest === 1 ? 'AA==' : rest === 2 ? 'AAA=' : '')
}

/** A response being played; `stop()` ends it early (cancelled, the client left). */
export interface Playing {
  stop(): void
}

/** Plays `plan` at absolute offsets (timer lateness never accumulates), respecting backpressure; `ended` is called once. */
export function playRealtime(
  socket: SimSocket,
  plan: RealtimePlan,
  format: RealtimeFormat,
  audio: boolean,
  ended: (how: 'done' | 'error' | 'closed' | 'stopped') => void,
): Playing {
  const start = monotonicNow()
  let due = 0
  let i = 0
  let timer: NodeJS.Timeout | undefined
  let over = false
  const finish = (how: 'done' | 'error' | 'closed' | 'stopped'): void => {
    if (over) return
    over = true
    clearTimeout(timer)
    ended(how)
  }
  const send = (messages: readonly string[]): boolean => {
    let fits = true
    for (const m of messages) fits = socket.send(m, format.binary) && fits
    return fits
  }
  const tick = (): void => {
    for (;;) {
      if (over) return
      if (socket.gone) {
        finish('stopped')
        return
      }
      if (plan.closeAfter !== undefined && i >= plan.closeAfter) {
        socket.close(1011, 'simulated server error')
        finish('closed')
        return
      }
      if (plan.errorAfter !== undefined && i >= plan.errorAfter) {
        send(format.error())
        finish('error')
        return
      }
      const step = plan.steps[i]
      if (step === undefined) {
        send(format.done())
        finish('done')
        return
      }
      const wait = due + step.afterMs - (monotonicNow() - start)
      if (wait > 0) {
        timer = setTimeout(tick, wait)
        return
      }
      due += step.afterMs
      const fits = send(
        format.step(
          i,
          chunkText(i, step.tokens),
          audio ? Math.round(step.tokens * plan.audioMsPerToken * PCM16_BYTES_PER_MS) : 0,
        ),
      )
      i++
      if (!fits) {
        void socket.drained().then(() => setImmediate(tick))
        return
      }
    }
  }
  tick()
  return { stop: () => finish('stopped') }
}
