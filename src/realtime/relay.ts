import type { Duplex } from 'node:stream'
import { Deadline } from '../proxy/deadlines.ts'
import type { Deadlines } from '../proxy/deadlines.ts'
import { closeFrame } from './frame.ts'

/**
 * A WebSocket session's byte path after the 101: reads are written to the other socket unchanged,
 * with backpressure both ways, and only then copied to the measuring side. The proxy writes a frame
 * of its own (close 1001) only to end a session, and only where a side's stream sits between frames.
 */

export const Side = { client: 'client', upstream: 'upstream' } as const
export type Side = (typeof Side)[keyof typeof Side]

export interface RelayEnd {
  /** `proxy` when the proxy closed the session. */
  readonly first: Side | 'proxy'
  /** Reset or failed rather than ended with a FIN. */
  readonly abrupt: boolean
  readonly proxyReason?: ProxyCloseReason
}

export type ProxyCloseReason = 'idle' | 'total' | 'shutdown'

export interface RelayObserver {
  data(from: Side, chunk: Buffer, at: number): void
  closed(end: RelayEnd, at: number): void
  /** Only then may a frame of the proxy's own go in. */
  atFrameBoundary(to: Side): boolean
}

export interface RelayOptions {
  /** Traffic either way keeps `idle` alive (pass-through.ts decides what expiry does). */
  readonly deadlines: Deadlines
  readonly now: () => number
}

/** How long a side the proxy closed gets to close its connection before it is destroyed. */
const CLOSE_GRACE_MS = 2_000

export class WebSocketRelay {
  readonly #client: Duplex
  readonly #upstream: Duplex
  readonly #observer: RelayObserver
  readonly #now: () => number
  readonly #deadlines: Deadlines
  #first: RelayEnd | undefined
  #open = 2
  #paused = 0
  #stopped = false

  constructor(client: Duplex, upstream: Duplex, observer: RelayObserver, options: RelayOptions) {
    this.#client = client
    this.#upstream = upstream
    this.#observer = observer
    this.#now = options.now
    this.#deadlines = options.deadlines
  }

  /** `clientHead`: frames the client sent without waiting for the 101. */
  start(clientHead: Buffer): void {
    this.#pipe(this.#client, this.#upstream, Side.client)
    this.#pipe(this.#upstream, this.#client, Side.upstream)
    this.#deadlines.start(Deadline.idle)
    this.#client.resume()
    this.#upstream.resume()
    // After resuming: a full upstream socket pauses the client again until it drains.
    if (clientHead.length > 0) this.#forward(this.#client, this.#upstream, Side.client, clientHead)
  }

  /** Ends the session: close 1001 to each side between frames, then the connections (destroyed after a grace). */
  close(reason: ProxyCloseReason): void {
    if (this.#stopped) return
    this.#stopped = true
    this.#first ??= { first: 'proxy', abrupt: false, proxyReason: reason }
    this.#deadlines.clear(Deadline.idle)
    const text = reason === 'shutdown' ? 'tokentap is shutting down' : `tokentap ${reason} timeout`
    for (const [socket, side, masked] of [
      [this.#client, Side.client, false],
      [this.#upstream, Side.upstream, true],
    ] as const) {
      if (socket.destroyed) continue
      // Read on (and drop) what still comes, so the peer's close and FIN are seen.
      socket.resume()
      // Frames to the upstream are the proxy's as a client: masked (RFC 6455 §5.3).
      if (this.#observer.atFrameBoundary(side)) socket.end(closeFrame(1001, text, masked))
      else socket.destroy()
      setTimeout(() => socket.destroy(), CLOSE_GRACE_MS).unref()
    }
  }

  #pipe(from: Duplex, to: Duplex, side: Side): void {
    from.on('data', (chunk: Buffer) => this.#forward(from, to, side, chunk))
    // The WebSocket closing handshake ends with the server's FIN.
    from.on('end', () => {
      this.#note(side, false)
      if (!to.destroyed) to.end()
    })
    from.on('error', () => {
      this.#note(side, true)
      from.destroy()
    })
    from.on('close', () => {
      if (!from.readableEnded) this.#note(side, true)
      // A reset passes on as a reset: the peer must not mistake it for a clean end.
      if (!from.readableEnded && !to.destroyed) to.destroy()
      // Nothing the other side sends can be delivered any more: it is closed after a grace.
      else if (!to.destroyed) setTimeout(() => to.destroy(), CLOSE_GRACE_MS).unref()
      if (--this.#open === 0) this.#closed()
    })
  }

  #forward(from: Duplex, to: Duplex, side: Side, chunk: Buffer): void {
    if (this.#stopped) return
    const at = this.#now()
    this.#deadlines.touch(Deadline.idle)
    if (!to.write(chunk)) {
      from.pause()
      if (this.#paused++ === 0) this.#deadlines.pause(Deadline.idle)
      to.once('drain', () => {
        if (--this.#paused === 0) this.#deadlines.resume(Deadline.idle)
        if (!this.#stopped) from.resume()
      })
    }
    this.#observer.data(side, chunk, at)
  }

  #note(side: Side, abrupt: boolean): void {
    this.#first ??= { first: side, abrupt }
  }

  #closed(): void {
    this.#deadlines.clear(Deadline.idle)
    this.#stopped = true
    this.#observer.closed(this.#first ?? { first: Side.client, abrupt: true }, this.#now())
  }
}
