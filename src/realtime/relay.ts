import type { Duplex } from 'node:stream'
import { Deadline } from '../proxy/deadlines.ts'
import type { Deadlines } from '../proxy/deadlines.ts'
import { closeFrame } from './frame.ts'

/**
 * The byte path of a WebSocket session after the 101: each socket's reads are written to the
 * other socket as they come, unchanged (frames, fragmentation, ping/pong, close frames), with
 * backpressure both ways (a side whose peer cannot take more is paused until 'drain'), and only
 * then handed to the measuring side as a copy. A FIN is passed on as a FIN, a reset as a reset.
 *
 * The proxy writes frames of its own only to end a session it must end (its idle or total
 * timeout, shutting down): a close frame (1001, going away) to each side, when that side's
 * incoming stream sits between two frames; otherwise the side's connection is simply closed.
 */

export const Side = { client: 'client', upstream: 'upstream' } as const
export type Side = (typeof Side)[keyof typeof Side]

/** How a relayed session ended, as the relay saw it on the sockets. */
export interface RelayEnd {
  /** The side whose connection went first (ended, reset or failed), or `proxy` when the proxy closed the session. */
  readonly first: Side | 'proxy'
  /** That side's connection was reset or failed rather than ended with a FIN. */
  readonly abrupt: boolean
  /** Why the proxy closed it (`idle`, `total`, `shutdown`), when it did. */
  readonly proxyReason?: ProxyCloseReason
}

export type ProxyCloseReason = 'idle' | 'total' | 'shutdown'

export interface RelayObserver {
  /** A read from `from`, already written to the other side, that arrived at `at`. */
  data(from: Side, chunk: Buffer, at: number): void
  /** Both connections are closed. */
  closed(end: RelayEnd, at: number): void
  /** The stream written to `to` sits between two frames, so a frame of the proxy's own may go in. */
  atFrameBoundary(to: Side): boolean
}

export interface RelayOptions {
  /** The session's deadlines: traffic either way keeps `idle` alive; its expiry closes the relay with 'idle' (pass-through.ts). */
  readonly deadlines: Deadlines
  /** The monotonic clock (ms) the observer's times come from. */
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

  /** Starts relaying; `clientHead`: bytes the client sent before the 101 (frames it did not wait to send). */
  start(clientHead: Buffer): void {
    this.#pipe(this.#client, this.#upstream, Side.client)
    this.#pipe(this.#upstream, this.#client, Side.upstream)
    this.#deadlines.start(Deadline.idle)
    this.#client.resume()
    this.#upstream.resume()
    // After resuming: a full upstream socket pauses the client again until it drains.
    if (clientHead.length > 0) this.#forward(this.#client, this.#upstream, Side.client, clientHead)
  }

  /**
   * The proxy ends the session: a close frame with 1001 to each side whose stream is between two
   * frames, then the connections are ended (and destroyed should they not close in a while).
   */
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
    // A FIN goes on as a FIN (the WebSocket closing handshake ends with the server's FIN).
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
      // Gone both ways: nothing the other side sends can be delivered any more. It had its FIN;
      // one that goes on sending (or never closes) is closed after a grace.
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
