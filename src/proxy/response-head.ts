import type { IncomingMessage, ServerResponse } from 'node:http'

/** Writing the upstream's response head, kept apart from forward.ts so every way it can fail is handled in one place. */

const ASCII_REASON = /^[\x20-\x7e]*$/

/**
 * Node writes a reason as latin1 but undici hands it over UTF-8 decoded, so re-encoding makes Node
 * write the exact bytes; bytes that were not UTF-8 cannot be restored (undefined: refuse).
 */
function reasonBytes(statusMessage: string): string | undefined {
  if (ASCII_REASON.test(statusMessage)) return statusMessage
  if (statusMessage.includes('\ufffd')) return undefined
  return Buffer.from(statusMessage, 'utf8').toString('latin1')
}

/**
 * Returns Node's error instead of throwing; a refused reason stays in `res.statusMessage` and
 * would make the error answer's writeHead throw again, so it is cleared.
 */
export function writeResponseHead(
  res: ServerResponse,
  statusCode: number,
  statusMessage: string,
  raw: string[],
): Error | undefined {
  const reason = statusMessage === '' ? undefined : reasonBytes(statusMessage)
  if (reason === undefined && statusMessage !== '') return new Error('the reason phrase is not valid UTF-8')
  try {
    res.writeHead(statusCode, reason, raw)
    return undefined
  } catch (err) {
    res.statusMessage = ''
    return err as Error
  }
}

/** Header names of an informational response that belong to the hop, never relayed (RFC 9110 §7.6.1). */
const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'te',
  'trailer',
])

/**
 * 103 Early Hints goes to an HTTP/1.1 client before the head (a 1xx must not reach HTTP/1.0, RFC
 * 9110 §15.2); other 1xx, and hints Node refuses, are dropped. Never throws.
 */
export function relayInformational(
  req: IncomingMessage,
  res: ServerResponse,
  statusCode: number,
  headers: Record<string, string | string[] | undefined>,
): void {
  if (statusCode !== 103 || res.headersSent || res.destroyed || req.httpVersionMajor !== 1 || req.httpVersionMinor < 1)
    return
  const hints: Record<string, string | string[]> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP.has(name.toLowerCase())) hints[name] = value
  }
  if (hints.link === undefined) return
  try {
    res.writeEarlyHints(hints)
  } catch {
    // A hint Node will not write is not worth the response.
  }
}
