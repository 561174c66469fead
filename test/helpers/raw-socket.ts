import { connect, createServer } from 'node:net'
import type { AddressInfo, Server, Socket } from 'node:net'

/** Raw TCP peers for bytes Node's own HTTP client and server cannot produce. */

/** Sends `bytes` to 127.0.0.1:port and resolves with everything received until the peer closes (or `timeoutMs`). */
export function rawExchange(port: number, bytes: string | Buffer, timeoutMs = 5_000): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = []
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes))
    const timer = setTimeout(() => socket.destroy(), timeoutMs)
    socket.on('data', (c: Buffer) => parts.push(c))
    socket.on('error', (err) => (parts.length > 0 ? undefined : reject(err)))
    socket.on('close', () => {
      clearTimeout(timer)
      resolve(Buffer.concat(parts))
    })
  })
}

/** The port of a listening server. */
export function portOf(url: string): number {
  return Number(new URL(url).port)
}

/** A raw TCP upstream: `onRequest` gets the socket and the request head bytes once they are complete. */
export interface RawUpstream {
  readonly url: string
  readonly server: Server
  /** Request heads received, as latin1 text. */
  readonly heads: string[]
  /** Sockets accepted so far, and those still open. */
  readonly accepted: number
  readonly open: number
  close(): Promise<void>
}

export async function startRawUpstream(onRequest: (socket: Socket, head: string) => void): Promise<RawUpstream> {
  const heads: string[] = []
  const sockets = new Set<Socket>()
  let accepted = 0
  const server = createServer((socket) => {
    accepted++
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => {})
    let buf = ''
    const onData = (c: Buffer): void => {
      buf += c.toString('latin1')
      const end = buf.indexOf('\r\n\r\n')
      if (end < 0) return
      socket.off('data', onData)
      const head = buf.slice(0, end + 4)
      heads.push(head)
      onRequest(socket, head)
    }
    socket.on('data', onData)
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    heads,
    get accepted() {
      return accepted
    },
    get open() {
      return sockets.size
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      }),
  }
}
