import type { ServerResponse } from 'node:http'
import type { TokentapError } from '../errors.ts'

/**
 * Writes a proxy error as JSON if the response has not started, else breaks the connection (a cut
 * stream must never look like a clean end). Returns the body bytes written.
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
    // A browser app must be able to read the error too (app-headers.ts).
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
