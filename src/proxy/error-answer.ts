import type { ServerResponse } from 'node:http'
import type { TokentapError } from '../errors.ts'

/**
 * Writes a proxy error as JSON, once, if the response has not started; else breaks the
 * connection (a client must never mistake a cut stream for a clean end). Returns the bytes of
 * body written (0 when none was).
 */
export function sendError(res: ServerResponse, err: TokentapError): number {
  if (res.headersSent || res.destroyed) {
    res.destroy()
    return 0
  }
  const body = err.toBody()
  const bytes = Buffer.byteLength(body)
  try {
    res.writeHead(err.httpStatus, { 'content-type': 'application/json', 'content-length': bytes })
  } catch {
    // A head that Node refused half-way (set by an earlier failed writeHead): nothing sane can follow.
    res.destroy()
    return 0
  }
  res.end(body)
  return bytes
}
