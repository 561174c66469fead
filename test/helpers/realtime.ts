import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import type { IncomingMessage, Server } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { connect } from 'node:net'
import type { AddressInfo, Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { WebSocket, WebSocketServer } from 'ws'
import type { ClientOptions, RawData, ServerOptions } from 'ws'
import type { SessionSummary } from '../../src/realtime/session.ts'

/**
 * Realtime test parts: a WebSocket upstream (the `ws` library's server, as a provider would run
 * one) and clients whose raw bytes are recorded at the socket, so a test can compare what one
 * end wrote with what the other read, byte for byte.
 */

/** Every byte a socket read and wrote, in order. */
export class Tape {
  readonly read: Buffer[] = []
  readonly written: Buffer[] = []

  /** Records `socket`'s reads and writes from now on. */
  static of(socket: Duplex): Tape {
    const tape = new Tape()
    socket.on('data', (c: Buffer) => tape.read.push(Buffer.from(c)))
    const write = socket.write.bind(socket) as (...args: unknown[]) => boolean
    ;(socket as unknown as { write: (...args: unknown[]) => boolean }).write = (chunk: unknown, ...rest: unknown[]) => {
      if (typeof chunk === 'string') tape.written.push(Buffer.from(chunk, typeof rest[0] === 'string' ? (rest[0] as BufferEncoding) : 'utf8'))
      else if (chunk instanceof Uint8Array) tape.written.push(Buffer.from(chunk))
      return write(chunk, ...rest)
    }
    return tape
  }

  /** What was read after the HTTP head (the frames). */
  readAfterHead(): Buffer {
    return afterHead(Buffer.concat(this.read))
  }

  writtenAfterHead(): Buffer {
    return afterHead(Buffer.concat(this.written))
  }
}

function afterHead(all: Buffer): Buffer {
  const end = all.indexOf('\r\n\r\n')
  return end < 0 ? Buffer.alloc(0) : all.subarray(end + 4)
}

/** One connection the upstream accepted. */
export interface UpstreamConnection {
  readonly ws: WebSocket
  readonly req: IncomingMessage
  /** The upstream's raw socket: bytes it read (the client's frames, through the proxy) and wrote. */
  readonly tape: Tape
  /** Messages received, in order. */
  readonly messages: { data: Buffer; binary: boolean }[]
  /** The close it got: code and reason. */
  closed: Promise<{ code: number; reason: string }>
  /** Resolves with the `n`-th message (1-based) once it came. */
  message(n: number): Promise<{ data: Buffer; binary: boolean }>
}

export interface WsUpstream {
  readonly url: string
  readonly port: number
  readonly server: Server
  readonly connections: UpstreamConnection[]
  /** Resolves with the `n`-th connection (1-based). */
  connection(n: number): Promise<UpstreamConnection>
  close(): Promise<void>
}

export interface WsUpstreamOptions extends Omit<ServerOptions, 'server' | 'port' | 'noServer'> {
  /** Serve over TLS with this key and certificate. */
  readonly tls?: { key: Buffer; cert: Buffer }
  /** Called with each new connection (send the first events here). */
  readonly onConnection?: (c: UpstreamConnection) => void
  /** Answer the upgrade yourself instead (a refusal, a server that never answers). */
  readonly onUpgrade?: (req: IncomingMessage, socket: Duplex) => boolean
}

/** Waits for a predicate over growing state, event-driven by `poke`. */
class Waiters {
  readonly #waiting = new Set<() => void>()
  poke(): void {
    for (const w of [...this.#waiting]) w()
  }
  until<T>(what: string, get: () => T | undefined, timeoutMs = 20_000): Promise<T> {
    const now = get()
    if (now !== undefined) return Promise.resolve(now)
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const v = get()
        if (v === undefined) return
        this.#waiting.delete(check)
        clearTimeout(timer)
        resolve(v)
      }
      const timer = setTimeout(() => {
        this.#waiting.delete(check)
        reject(new Error(`waited ${timeoutMs} ms for ${what}`))
      }, timeoutMs)
      this.#waiting.add(check)
    })
  }
}

const toBuffer = (data: RawData): Buffer => (Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data))

export async function startWsUpstream(options: WsUpstreamOptions = {}): Promise<WsUpstream> {
  const { tls, onConnection, onUpgrade, ...wsOptions } = options
  const server = tls === undefined ? createServer() : createHttpsServer({ key: tls.key, cert: tls.cert })
  const wss = new WebSocketServer({ noServer: true, ...wsOptions })
  const connections: UpstreamConnection[] = []
  const waiters = new Waiters()
  const tapes = new WeakMap<Duplex, Tape>()
  const sockets = new Set<Socket>()
  server.on(tls === undefined ? 'connection' : 'secureConnection', (socket: Socket) => {
    tapes.set(socket, Tape.of(socket))
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (onUpgrade?.(req, socket) === true) return
    wss.handleUpgrade(req, socket, head, (ws) => {
      const messages: { data: Buffer; binary: boolean }[] = []
      const local = new Waiters()
      let closed!: (v: { code: number; reason: string }) => void
      const c: UpstreamConnection = {
        ws,
        req,
        tape: tapes.get(socket) ?? new Tape(),
        messages,
        closed: new Promise((resolve) => (closed = resolve)),
        message: (n) => local.until(`upstream message ${n}`, () => messages[n - 1]),
      }
      ws.on('message', (data, binary) => {
        messages.push({ data: toBuffer(data), binary })
        local.poke()
      })
      ws.on('close', (code, reason) => closed({ code, reason: reason.toString('utf8') }))
      ws.on('error', () => {})
      connections.push(c)
      waiters.poke()
      onConnection?.(c)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `${tls === undefined ? 'http' : 'https'}://127.0.0.1:${port}`,
    port,
    server,
    connections,
    connection: (n) => waiters.until(`upstream connection ${n}`, () => connections[n - 1]),
    async close() {
      for (const c of connections) c.ws.terminate()
      wss.close()
      // Upgraded sockets are no longer the HTTP server's to close.
      for (const s of sockets) s.destroy()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/** Answers a WebSocket upgrade with a bare 101 (no extensions), for upstreams that then write raw frames. */
export function acceptRaw(req: IncomingMessage, socket: Duplex): void {
  const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64')
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`)
}

/** The close frames in raw client-to-server bytes (masked frames): their codes, in order. */
export function closeCodesIn(bytes: Buffer): number[] {
  const codes: number[] = []
  let i = 0
  while (i + 2 <= bytes.length) {
    const opcode = bytes[i] & 0x0f
    const masked = (bytes[i + 1] & 0x80) !== 0
    let len = bytes[i + 1] & 0x7f
    let at = i + 2
    if (len === 126) {
      len = bytes.readUInt16BE(at)
      at += 2
    } else if (len === 127) {
      len = Number(bytes.readBigUInt64BE(at))
      at += 8
    }
    const mask = masked ? bytes.subarray(at, at + 4) : undefined
    if (masked) at += 4
    if (opcode === 0x8 && len >= 2 && at + 2 <= bytes.length) {
      const b0 = bytes[at] ^ (mask?.[0] ?? 0)
      const b1 = bytes[at + 1] ^ (mask?.[1] ?? 0)
      codes.push((b0 << 8) | b1)
    }
    i = at + len
  }
  return codes
}

/** A `ws` client whose socket is recorded, with its messages and close. */
export interface TapedClient {
  readonly ws: WebSocket
  readonly tape: Tape
  /** The client's TCP socket (to stop reading, for backpressure). */
  readonly socket: Socket
  readonly messages: { data: Buffer; binary: boolean }[]
  readonly opened: Promise<void>
  readonly closed: Promise<{ code: number; reason: string }>
  message(n: number): Promise<{ data: Buffer; binary: boolean }>
}

export function tapedClient(url: string, options: ClientOptions = {}, protocols?: string | string[]): TapedClient {
  let tape = new Tape()
  let raw: Socket | undefined
  const ws = new WebSocket(url, protocols, {
    ...options,
    createConnection: ((opts: { host?: string; port?: number | string }) => {
      const socket = connect(Number(opts.port), opts.host ?? '127.0.0.1')
      tape = Tape.of(socket)
      raw = socket
      return socket
    }) as unknown as ClientOptions['createConnection'],
  })
  const messages: { data: Buffer; binary: boolean }[] = []
  const waiters = new Waiters()
  ws.on('message', (data, binary) => {
    messages.push({ data: toBuffer(data), binary })
    waiters.poke()
  })
  ws.on('error', () => {})
  return {
    ws,
    get tape() {
      return tape
    },
    get socket() {
      if (raw === undefined) throw new Error('the client has no socket yet')
      return raw
    },
    messages,
    opened: new Promise((resolve, reject) => {
      ws.once('open', () => resolve())
      ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)))
      ws.once('error', reject)
    }),
    closed: new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString('utf8') }))),
    message: (n) => waiters.until(`client message ${n}`, () => messages[n - 1]),
  }
}

/** Resolves once `check()` holds, looking again every few ms (for state the test cannot be told about). */
export async function eventually(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`)
    await new Promise((r) => setTimeout(r, 2))
  }
}

/** Asks for a response (with a simulator plan) and waits until the client has `done` response.done events in all. */
export async function respond(c: TapedClient, plan: Record<string, unknown>, done: number): Promise<void> {
  c.ws.send(JSON.stringify({ type: 'response.create', tokentap_sim: plan }))
  await eventually('response.done', () => c.messages.filter((m) => m.data.includes('"type":"response.done"')).length >= done)
}

/**
 * One OpenAI Realtime session through a proxy's simulator route (`prefix`): one audio response of
 * 3 steps (transcript and audio each), then a normal close, so every llm_realtime_ family reports.
 */
export async function driveRealtimeSession(proxyUrl: string, prefix = '/sim'): Promise<void> {
  const c = tapedClient(`${proxyUrl.replace('http', 'ws')}${prefix}/v1/realtime?model=gpt-realtime`)
  await c.opened
  await respond(
    c,
    {
      ttft_ms: 1,
      first_tokens: 1,
      chunks: [
        [1, 1],
        [1, 1],
      ],
      audio_ms_per_token: 20,
    },
    1,
  )
  c.ws.close(1000)
  await c.closed
}

/** A finished session's summary: a client's normal close after two responses, with `over` on top. */
export function sessionSummary(over: Partial<SessionSummary> = {}): SessionSummary {
  return {
    outcome: 'ok',
    statusCode: 101,
    failure: undefined,
    duration: 2,
    close: { from: 'client', code: 1000, reason: '' },
    endedBy: 'client',
    bytesFromClient: 0,
    bytesFromUpstream: 0,
    messagesFromClient: 0,
    messagesFromUpstream: 0,
    unread: 0,
    parseError: undefined,
    responses: 2,
    ...over,
  } as SessionSummary
}
