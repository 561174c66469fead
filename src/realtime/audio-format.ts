import { isObject } from '../parsers/json.ts'

/** Bytes of audio per second of the session's output format, for the audio underrun. */

/** OpenAI Realtime's default output: PCM16, 24 kHz, mono. */
export const DEFAULT_BYTES_PER_SECOND = 48_000
const G711_BYTES_PER_SECOND = 8_000
/** Anything else is no rate, so the default stands. */
const MIN_RATE = 1_000
const MAX_RATE = 768_000
const isRate = (rate: unknown): rate is number =>
  typeof rate === 'number' && Number.isFinite(rate) && rate >= MIN_RATE && rate <= MAX_RATE

/** The beta's string (`pcm16`, `g711_ulaw`, `g711_alaw`) or the GA's object (`{ type: 'audio/pcm', rate: 24000 }`). */
export function openAIBytesPerSecond(format: unknown): number | undefined {
  if (typeof format === 'string') {
    if (format === 'pcm16') return DEFAULT_BYTES_PER_SECOND
    if (format === 'g711_ulaw' || format === 'g711_alaw') return G711_BYTES_PER_SECOND
    return undefined
  }
  if (!isObject(format) || typeof format.type !== 'string') return undefined
  if (format.type === 'audio/pcmu' || format.type === 'audio/pcma') return G711_BYTES_PER_SECOND
  if (format.type !== 'audio/pcm') return undefined
  return isRate(format.rate) ? format.rate * 2 : DEFAULT_BYTES_PER_SECOND
}

/** A media type of inline audio (Gemini: `audio/pcm;rate=24000`); undefined when it is not audio the proxy can time. */
export function mimeBytesPerSecond(mime: string): number | undefined {
  const [type, ...params] = mime.split(';').map((p) => p.trim().toLowerCase())
  if (type === 'audio/pcmu' || type === 'audio/pcma' || type === 'audio/basic') return G711_BYTES_PER_SECOND
  if (type !== 'audio/pcm' && type !== 'audio/l16') return undefined
  for (const p of params) {
    const [name, value] = p.split('=')
    const rate = Number(value)
    if (name === 'rate' && isRate(rate)) return rate * 2
  }
  // Gemini Live answers at 24 kHz when the type names no rate.
  return DEFAULT_BYTES_PER_SECOND
}

/** Never decoded: from its length and padding alone. */
export function base64Bytes(text: string): number {
  let n = text.length
  while (n > 0 && text.charCodeAt(n - 1) === 61 /* = */) n--
  return Math.floor((n * 3) / 4)
}
