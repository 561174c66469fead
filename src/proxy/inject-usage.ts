import type { IncomingMessage } from 'node:http'

/**
 * `inject_usage`: adds `stream_options.include_usage` to an OpenAI-compatible streaming request
 * that lacks `stream_options`, and takes the resulting usage-only chunk out of the answer, so the
 * client sees exactly the stream it asked for while the proxy reads the provider's token count.
 * https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options
 */

const INJECTED = Buffer.from(',"stream_options":{"include_usage":true}')

/** Decided for sure once its body is read. */
export function mayInject(req: IncomingMessage, path: string): boolean {
  if (req.method !== 'POST' || !/\/(chat\/)?completions$/.test(path)) return false
  const type = req.headers['content-type']
  if (type !== undefined && !/json/i.test(type)) return false
  const encoding = req.headers['content-encoding']
  return encoding === undefined || encoding === 'identity'
}

export interface PreparedBody {
  readonly body: Buffer
  readonly injected: boolean
  readonly model: string | undefined
}

/**
 * Inserts the member before the closing brace rather than re-serialising, so numbers, spacing and
 * key order reach the upstream unchanged; any `stream_options` key (even `null`) is the client's choice.
 */
export function prepareBody(raw: Buffer): PreparedBody {
  let value: unknown
  try {
    value = JSON.parse(raw.toString('utf8'))
  } catch {
    return { body: raw, injected: false, model: undefined }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return { body: raw, injected: false, model: undefined }
  const v = value as Record<string, unknown>
  const model = typeof v.model === 'string' ? v.model : undefined
  if (v.stream !== true || Object.hasOwn(v, 'stream_options')) return { body: raw, injected: false, model }
  let end = raw.length - 1
  while (end >= 0 && (raw[end] === 0x20 || raw[end] === 0x0a || raw[end] === 0x0d || raw[end] === 0x09)) end--
  if (raw[end] !== 0x7d /* } */) return { body: raw, injected: false, model }
  return { body: Buffer.concat([raw.subarray(0, end), INJECTED, raw.subarray(end)]), injected: true, model }
}

const LF = 10
const CR = 13
const USAGE = Buffer.from('"usage"')

function isUsageOnly(event: Buffer): boolean {
  if (!event.includes(USAGE)) return false
  let data = ''
  for (const line of event.toString('utf8').split(/\r\n|\r|\n/)) {
    if (line.startsWith('data:')) data += (data === '' ? '' : '\n') + line.slice(line[5] === ' ' ? 6 : 5)
  }
  try {
    const v = JSON.parse(data) as Record<string, unknown>
    return Array.isArray(v.choices) && v.choices.length === 0 && typeof v.usage === 'object' && v.usage !== null
  } catch {
    return false
  }
}

/**
 * Takes the first usage-only event out of an SSE byte stream; each event goes out once its blank
 * line arrives, and a read with nothing removed is returned as it is (no copy).
 */
export class UsageChunkFilter {
  #held: Buffer[] = []
  #lineLength = 0
  /** The last byte seen was a CR: a following LF belongs to the same line end. */
  #afterCR = false
  /** That CR ended a blank line: the event ends after it (and after a following LF). */
  #endAtCR = false
  #removed = false

  push(chunk: Buffer): Buffer {
    if (this.#removed) return this.#flushThen(chunk)
    const kept: Buffer[] = []
    // Only when nothing was held can a kept event of the read's length be the read itself.
    const whole = this.#held.length === 0
    let start = 0
    const cut = (end: number): void => {
      const piece = chunk.subarray(start, end)
      const event = this.#held.length === 0 ? piece : Buffer.concat([...this.#held, piece])
      this.#held = []
      start = end
      if (!this.#removed && isUsageOnly(event)) this.#removed = true
      else kept.push(event)
    }
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i]
      if (this.#afterCR) {
        this.#afterCR = false
        if (b === LF) {
          if (this.#endAtCR) {
            this.#endAtCR = false
            cut(i + 1)
          }
          continue
        }
        if (this.#endAtCR) {
          this.#endAtCR = false
          cut(i)
        }
      }
      if (b === CR) {
        this.#afterCR = true
        this.#endAtCR = this.#lineLength === 0
        this.#lineLength = 0
      } else if (b === LF) {
        if (this.#lineLength === 0) cut(i + 1)
        this.#lineLength = 0
      } else {
        this.#lineLength++
      }
      if (this.#removed && start === i + 1) {
        this.#afterCR = false
        this.#endAtCR = false
        kept.push(chunk.subarray(start))
        start = chunk.length
        break
      }
    }
    if (start < chunk.length) this.#held.push(chunk.subarray(start))
    if (whole && kept.length === 1 && kept[0].length === chunk.length) return chunk
    return kept.length === 1 ? kept[0] : Buffer.concat(kept)
  }

  /** An unfinished event goes out as it came. */
  end(): Buffer {
    const rest = this.#held.length === 0 ? Buffer.alloc(0) : Buffer.concat(this.#held)
    this.#held = []
    return rest
  }

  #flushThen(chunk: Buffer): Buffer {
    if (this.#held.length === 0) return chunk
    const out = Buffer.concat([...this.#held, chunk])
    this.#held = []
    return out
  }
}
