import type { IncomingMessage } from 'node:http'
import { TokentapError } from '../errors.ts'

/** SDKs write the model first; images come later. */
const SNIFF_BYTES = 64 * 1024
const MODEL_RE = /"model"\s*:\s*"((?:[^"\\\n]|\\.){1,256})"/

export interface BodyWatch {
  model: string | undefined
  bytes: number
}

/** Undefined when the body is chunked or absent. */
export function declaredLength(req: IncomingMessage): number | undefined {
  const v = req.headers['content-length']
  if (v === undefined) return undefined
  const n = Number(v)
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined
}

/** Whether the request carries a body at all (RFC 9112 §6.3). */
export function hasBody(req: IncomingMessage): boolean {
  if (req.headers['transfer-encoding'] !== undefined) return true
  const n = declaredLength(req)
  return n !== undefined && n > 0
}

/** Throws `tooLarge()`'s error once the body outgrows `limit`, which aborts the upstream request. */
export function watchBody(
  req: IncomingMessage,
  limit: number,
  tooLarge: () => Error,
  touched?: () => void,
): { watch: BodyWatch; body: AsyncIterable<Buffer> } {
  const watch: BodyWatch = { model: undefined, bytes: 0 }
  async function* body(): AsyncGenerator<Buffer> {
    let head = ''
    let sniffing = true
    // The client's socket must live until the 413 is written; destroying `req` would destroy it.
    for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
      watch.bytes += chunk.length
      touched?.()
      if (watch.bytes > limit) throw tooLarge()
      if (sniffing) {
        head += chunk.toString('utf8', 0, Math.min(chunk.length, SNIFF_BYTES - head.length))
        const m = MODEL_RE.exec(head)
        if (m !== null) {
          watch.model = decodeJsonString(m[1])
          sniffing = false
          head = ''
        } else if (head.length >= SNIFF_BYTES) {
          sniffing = false
          head = ''
        }
      }
      yield chunk
    }
  }
  return { watch, body: body() }
}

/** Calls `done` once; listeners and a callback, not a Promise of `once`s, as this runs for nearly every request. */
export function readBody(
  req: IncomingMessage,
  limit: number,
  touched: (() => void) | undefined,
  done: (err: TokentapError | undefined, body: Buffer) => void,
): void {
  const parts: Buffer[] = []
  let bytes = 0
  let settled = false
  const settle = (err: TokentapError | undefined, body: Buffer): void => {
    if (settled) return
    settled = true
    // Left on `req`, the listeners would hold the body's reads and `done` for as long as the response
    // streams; an IncomingMessage without an 'error' listener emits no error.
    req.off('data', onData)
    req.off('end', onEnd)
    req.off('error', onError)
    req.off('close', onClose)
    done(err, body)
  }
  const onData = (chunk: Buffer): void => {
    bytes += chunk.length
    touched?.()
    if (bytes > limit) {
      req.resume()
      settle(new TokentapError('TOKENTAP_ERR_BODY_TOO_LARGE', limit), EMPTY)
      return
    }
    parts.push(chunk)
  }
  const onEnd = (): void => settle(undefined, Buffer.concat(parts, bytes))
  const onError = (err: Error): void => settle(new TokentapError('TOKENTAP_ERR_BAD_REQUEST', err.message), EMPTY)
  const onClose = (): void => {
    if (!req.complete)
      settle(
        new TokentapError('TOKENTAP_ERR_BAD_REQUEST', 'the client closed the connection before the body ended'),
        EMPTY,
      )
  }
  req.on('data', onData)
  req.on('end', onEnd)
  req.on('error', onError)
  req.on('close', onClose)
}

const EMPTY = Buffer.alloc(0)

export function sniffModel(body: Buffer): string | undefined {
  const m = MODEL_RE.exec(body.toString('utf8', 0, Math.min(body.length, SNIFF_BYTES)))
  return m === null ? undefined : decodeJsonString(m[1])
}

function decodeJsonString(inner: string): string {
  // Without a backslash JSON.parse gives the text back (or throws, which gives it back too).
  if (inner.indexOf('\\') < 0) return inner
  try {
    return JSON.parse(`"${inner}"`) as string
  } catch {
    return inner
  }
}
