import type { ServerResponse } from 'node:http'
import type { TokentapError } from '../errors.ts'

/**
 * Writes a proxy error as JSON, once, if the response has not started; else breaks the
 * connection (a client must never mistake a cut stream for a clean end). Returns the bytes of
 * body written (0 when none was).
 */
export function sendError(res: ServerResponse, err: TokentapError, appHeaders?: readonly string[]): number {
  if (res.headersSent || res.destroyed) {
    res.destroy()
    return 0
  }
  const body = err.toBody()
  const bytes = Buffer.byteLength(body)
  try {
    const head = ['content-type', 'application/json', 'content-length', String(bytes)]
    // The embedding app's headers (CORS, rate limits: app-headers.ts): a browser app must be able to read the error too.
    if (appHeaders !== undefined) for (const v of appHeaders) head.push(v)
    res.writeHead(err.httpStatus, head)
  } catch {
    // A head that Node refused half-way (set by an earlier failed writeHead): nothing sane can follow.
    res.destroy()
    return 0
  }
  res.end(body)
  return bytes
}
