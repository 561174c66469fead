import { createServer } from 'node:http'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/** A real HTTP upstream on port 0 whose behaviour a test writes. */
export interface TestUpstream {
  readonly url: string
  readonly server: Server
  /** Requests seen so far (method, url, raw headers, body). */
  readonly requests: { method: string; url: string; rawHeaders: string[]; body: Buffer }[]
  /** TCP connections accepted so far (keep-alive reuse shows as fewer sockets than requests). */
  readonly sockets: number
  /** Requests whose 'close' fired before their response finished (the proxy went away). */
  readonly aborted: number
  close(): Promise<void>
}

export interface UpstreamOptions {
  /** Call the handler as soon as headers arrive, leaving the body unread (streaming and limit tests). */
  readonly raw?: boolean
}

export type UpstreamHandler = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void | Promise<void>

export async function startUpstream(handler: UpstreamHandler, options: UpstreamOptions = {}): Promise<TestUpstream> {
  const requests: TestUpstream['requests'] = []
  let sockets = 0
  let aborted = 0
  const server = createServer((req, res) => {
    res.once('close', () => {
      if (!res.writableFinished) aborted++
    })
    if (options.raw === true) {
      requests.push({ method: req.method ?? '', url: req.url ?? '', rawHeaders: req.rawHeaders, body: Buffer.alloc(0) })
      void handler(req, res, Buffer.alloc(0))
      return
    }
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => {
      const body = Buffer.concat(parts)
      requests.push({ method: req.method ?? '', url: req.url ?? '', rawHeaders: req.rawHeaders, body })
      void handler(req, res, body)
    })
  })
  server.on('connection', () => sockets++)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    requests,
    get sockets() {
      return sockets
    },
    get aborted() {
      return aborted
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/** One piece of a replayed response: bytes, written `afterMs` after the previous piece. */
export interface Piece {
  readonly afterMs: number
  readonly bytes: Buffer | string
}

export interface ReplayOptions {
  /**
   * Each piece `afterMs` after the previous one was written, instead of at an offset from the
   * start: a late piece then delays the rest, so no gap is ever shorter than planned (for tests
   * whose point is a gap, which a frozen or descheduled process would otherwise shrink to 0).
   */
  readonly relative?: boolean
}

/**
 * Writes the pieces with their timing: by default at absolute offsets from the start, so
 * lateness does not add up. A piece is never written before it is due (a timer can fire a
 * fraction of a millisecond early by `performance.now()`), so lower bounds on gaps hold.
 */
export async function replay(res: ServerResponse, pieces: readonly Piece[], options: ReplayOptions = {}): Promise<void> {
  let from = performance.now()
  let due = 0
  for (const p of pieces) {
    due += p.afterMs
    for (let wait = due - (performance.now() - from); wait > 0; wait = due - (performance.now() - from)) await new Promise((r) => setTimeout(r, wait))
    if (res.destroyed) return
    res.write(p.bytes)
    if (options.relative === true) {
      from = performance.now()
      due = 0
    }
  }
  res.end()
}

/** Splits a recorded SSE body into its events (each with its terminating blank line). */
export function sseEvents(body: string): string[] {
  const out: string[] = []
  const re = /[\s\S]*?(?:\r\n\r\n|\n\n|\r\r)/g
  let last = 0
  for (const m of body.matchAll(re)) {
    out.push(m[0])
    last = m.index + m[0].length
  }
  if (last < body.length) out.push(body.slice(last))
  return out
}
