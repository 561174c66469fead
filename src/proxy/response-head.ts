import type { IncomingMessage, ServerResponse } from 'node:http'

/**
 * Writing the upstream's response head to the client: the status line byte for byte, and the
 * informational (1xx) responses that may come before it. Kept apart from forward.ts so every
 * way the head can fail is handled in one place.
 */

/** Printable ASCII: the reason phrase nearly every server sends, written as it is. */
const ASCII_REASON = /^[\x20-\x7e]*$/

/**
 * The reason phrase as Node must be given it to write the upstream's bytes. undici hands it over
 * UTF-8 decoded; Node writes a reason as latin1 (one byte per char). Re-encoding the text as
 * UTF-8 and reading those bytes as latin1 makes Node write exactly the bytes that came (`200
 * Réussi` stays C3 A9). Bytes that were not UTF-8 were replaced by U+FFFD when decoded and
 * cannot be restored: undefined, and the caller refuses the response.
 */
function reasonBytes(statusMessage: string): string | undefined {
  if (ASCII_REASON.test(statusMessage)) return statusMessage
  if (statusMessage.includes('\ufffd')) return undefined
  return Buffer.from(statusMessage, 'utf8').toString('latin1')
}

/**
 * `res.writeHead` with the upstream's status, reason and raw headers; returns the error instead
 * of throwing when Node refuses them (a control byte in the reason, an invalid header value).
 * Node keeps a refused reason in `res.statusMessage`, so the error answer's own writeHead would
 * throw again: it is cleared, and the response is left as if writeHead was never called.
 */
export function writeResponseHead(res: ServerResponse, statusCode: number, statusMessage: string, raw: string[]): Error | undefined {
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
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'content-length', 'te', 'trailer'])

/**
 * An informational (1xx) response from the upstream, before the final one. 103 Early Hints goes
 * to the client (`res.writeEarlyHints`) when it speaks HTTP/1.1 and the head has not started
 * (a 1xx must not go to an HTTP/1.0 client, RFC 9110 §15.2); 102 Processing and others are
 * dropped: the client's own exchange has no use for them. Never throws: hints Node refuses are
 * dropped too. (An unsolicited 100 never gets here: undici fails the request on it.)
 */
export function relayInformational(req: IncomingMessage, res: ServerResponse, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
  if (statusCode !== 103 || res.headersSent || res.destroyed || req.httpVersionMajor !== 1 || req.httpVersionMinor < 1) return
  const hints: Record<string, string | string[]> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP.has(name.toLowerCase())) hints[name] = value
  }
  // Node sends nothing for hints without a link (its writeEarlyHints returns early).
  if (hints.link === undefined) return
  try {
    res.writeEarlyHints(hints)
  } catch {
    // A hint Node will not write is not worth the response.
  }
}
