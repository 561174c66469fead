import { createHash } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { CloseCode, Opcode, closeFrame, encodeFrame } from '../realtime/frame.ts'
import { FrameDecoder } from '../realtime/frame-decoder.ts'

/** The simulator's side of a WebSocket (RFC 6455), just what a simulated model needs, with no dependency since it ships with tokentap. */

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
/** The largest message the simulator reads from a client (an input audio append is large). */
const MAX_MESSAGE = 16 * 1024 * 1024

export interface SimSocketEvents {
  /** A whole message from the client (text frames as text, binary frames as JSON text too). */
  message(text: string): void
  /** The connection is gone (after a close handshake or not). */
  closed(): void
}

export class SimSocket {
  readonly #socket: Duplex
  #closing = false

  constructor(socket: Duplex, events: SimSocketEvents) {
    this.#socket = socket
    const decoder = new FrameDecoder(
      {
        message: (_opcode, payload) => {
          if (payload !== undefined) events.message(payload.toString('utf8'))
        },
        close: (code, reason) => this.close(code ?? CloseCode.normal, reason),
      },
      MAX_MESSAGE,
    )
    socket.on('data', (chunk: Buffer) => decoder.push(chunk))
    socket.on('error', () => socket.destroy())
    socket.on('close', () => events.closed())
    socket.on('end', () => socket.end())
  }

  /** The connection is closing or closed: nothing more should be sent. */
  get gone(): boolean {
    return this.#closing || this.#socket.destroyed
  }

  /** Sends one message; false when the socket's buffer is full (wait for `drained()` before the next). */
  send(text: string, binary = false): boolean {
    if (this.gone) return true
    return this.#socket.write(encodeFrame(binary ? Opcode.binary : Opcode.text, Buffer.from(text, 'utf8'), false))
  }

  /** Resolves once the socket's buffer has room again. */
  drained(): Promise<void> {
    return new Promise((resolve) => {
      if (this.#socket.destroyed) resolve()
      else this.#socket.once('drain', () => resolve())
    })
  }

  /** Starts (or answers) the closing handshake; the server ends the TCP connection after it (RFC 6455 §7.1.1). */
  close(code: number, reason: string): void {
    if (this.#closing) return
    this.#closing = true
    if (!this.#socket.destroyed) this.#socket.end(closeFrame(code, reason, false))
  }

  /** Drops the connection without a close frame (a server that fails). */
  destroy(): void {
    this.#closing = true
    this.#socket.destroy()
  }
}

/** Answers an upgrade with 101 (the first offered subprotocol taken) or 400; the socket, or undefined. */
export function acceptWebSocket(req: IncomingMessage, socket: Duplex, events: SimSocketEvents): SimSocket | undefined {
  const key = req.headers['sec-websocket-key']
  if (typeof key !== 'string' || key.length === 0 || req.headers['sec-websocket-version'] !== '13') {
    socket.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
    return undefined
  }
  const accept = createHash('sha1')
    .update(key + GUID)
    .digest('base64')
  const offered = req.headers['sec-websocket-protocol']
  const protocol = typeof offered === 'string' ? offered.split(',')[0].trim() : undefined
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n${protocol ? `Sec-WebSocket-Protocol: ${protocol}\r\n` : ''}\r\n`,
  )
  return new SimSocket(socket, events)
}
