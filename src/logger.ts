import { constants, fstatSync, openSync, write as fsWrite } from 'node:fs'
import { Socket } from 'node:net'
import pino from 'pino'
import type { Logger } from 'pino'
import type { Config } from './config/schema.ts'

/**
 * The process's log: pino lines batched (8 KiB or 50 ms) into one asynchronous write off the request path, dropped past
 * 16 MiB waiting, so a slow or dead reader can never stall or hang the process, unlike sonic-boom (`tokentap | head -1`
 * looped on EPIPE; a full pipe blocked the event loop, and a thread blocked in write(2) holds Node's exit forever).
 * EAGAIN is retried on a timer, any other error drops every later line, and shutdown waits a bounded time (`closeLogger`).
 */

const LOG_BATCH_BYTES = 8192
const LOG_FLUSH_MS = 50
const LOG_BUFFER_BYTES = 16 * 1024 * 1024
const EAGAIN_RETRY_MS = 20

export interface LogDestinationOptions {
  /** Start a write once this many characters wait (default 8 KiB). */
  readonly batchBytes?: number
  /** Write what waits after this long at most (default 50 ms). */
  readonly flushMs?: number
  /** Drop lines past this many waiting characters (default 16 MiB). */
  readonly maxBufferBytes?: number
}

/** A pino destination on a file descriptor: batched, bounded, asynchronous, and inert once the descriptor fails. */
export class LogDestination {
  readonly #fd: number
  readonly #batch: number
  readonly #flushMs: number
  readonly #max: number
  #parts: string[] = []
  /** Characters waiting in #parts (lines are mostly ASCII; a bound, not an exact byte count). */
  #length = 0
  #writing = false
  #timer: NodeJS.Timeout | undefined
  #idle: (() => void)[] = []
  /** The error that ended output, if one did. */
  failed: NodeJS.ErrnoException | undefined
  /** Lines dropped: the buffer was full, or the destination is dead. */
  dropped = 0

  /** The descriptor as a non-blocking libuv stream, when it is a socket. */
  readonly #socket: Socket | undefined

  constructor(fd: number, options: LogDestinationOptions = {}) {
    this.#fd = fd
    this.#socket = isSocket(fd) ? this.#openSocket(fd) : undefined
    this.#batch = options.batchBytes ?? LOG_BATCH_BYTES
    this.#flushMs = options.flushMs ?? LOG_FLUSH_MS
    this.#max = options.maxBufferBytes ?? LOG_BUFFER_BYTES
  }

  /** pino's stream interface: one serialized line. Never throws, never blocks. */
  write(line: string): boolean {
    if (this.failed !== undefined || this.#length + line.length > this.#max) {
      this.dropped++
      return true
    }
    this.#parts.push(line)
    this.#length += line.length
    if (this.#length >= this.#batch) this.#flush()
    else if (!this.#writing) this.#schedule()
    return true
  }

  /** pino's `logger.flush(cb)`: writes what waits; `cb` once all of it is out (or output failed). */
  flush(cb?: (err?: Error) => void): void {
    this.#flush()
    if (cb === undefined) return
    if (!this.#writing && this.#length === 0) cb(this.failed)
    else this.#idle.push(() => cb(this.failed))
  }

  /** Resolves once every waiting line is written, output failed, or `timeoutMs` passed. */
  drain(timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs)
      timer.unref()
      this.flush(() => {
        clearTimeout(timer)
        resolve()
      })
    })
  }

  #schedule(): void {
    if (this.#timer !== undefined) return
    this.#timer = setTimeout(() => {
      this.#timer = undefined
      this.#flush()
    }, this.#flushMs)
    this.#timer.unref()
  }

  #flush(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer)
      this.#timer = undefined
    }
    if (this.#writing || this.#length === 0 || this.failed !== undefined) return
    const data = Buffer.from(this.#parts.length === 1 ? this.#parts[0] : this.#parts.join(''), 'utf8')
    this.#parts = []
    this.#length = 0
    this.#writing = true
    this.#out(data)
  }

  #openSocket(fd: number): Socket | undefined {
    let socket: Socket
    try {
      socket = new Socket({ fd, readable: false, writable: true })
    } catch {
      return undefined
    }
    // The log never keeps the process alive; shutdown waits for it a bounded time (drain).
    socket.unref()
    socket.on('error', (err: NodeJS.ErrnoException) => this.#fail(err))
    return socket
  }

  #out(data: Buffer): void {
    if (this.#socket !== undefined) {
      // libuv writes what the socket takes now and the rest as it drains, on the event loop.
      this.#socket.write(data, (err) => (err ? this.#fail(err) : this.#written()))
      return
    }
    fsWrite(this.#fd, data, 0, data.length, null, (err, written) => {
      if (err !== null) {
        if (err.code === 'EAGAIN') {
          setTimeout(() => this.#out(data), EAGAIN_RETRY_MS).unref()
          return
        }
        this.#fail(err)
        return
      }
      if (written < data.length) {
        this.#out(data.subarray(written))
        return
      }
      this.#written()
    })
  }

  #written(): void {
    this.#writing = false
    if (this.#length >= this.#batch) this.#flush()
    else if (this.#length > 0 && this.#idle.length > 0) this.#flush()
    else if (this.#length > 0) this.#schedule()
    else this.#settle()
  }

  #fail(err: NodeJS.ErrnoException): void {
    // A socket reports one failure twice: to the write's callback and as 'error'.
    if (this.failed !== undefined) return
    this.failed = err
    this.#writing = false
    this.dropped += this.#parts.length
    this.#parts = []
    this.#length = 0
    this.#settle()
  }

  #settle(): void {
    const idle = this.#idle
    this.#idle = []
    for (const f of idle) f()
  }
}

/** Whether `fd` is a socket (false when it cannot be inspected). */
function isSocket(fd: number): boolean {
  try {
    return fstatSync(fd).isSocket()
  } catch {
    return false
  }
}

const destinations = new WeakMap<Logger, LogDestination>()

/** String.prototype.isWellFormed (Node 20+; the project's TypeScript lib predates it). */
const wellFormed = (s: string): boolean => (s as string & { isWellFormed(): boolean }).isWellFormed()

/** `err`, and the top-level keys createLogger's redaction paths start with: pino serializes those values itself. */
const pinoOwn = (key: string): boolean =>
  (key.length === 3 && (key === 'err' || key === 'req' || key === 'res')) || key === 'headers'

/**
 * Writes what createLogger's `logger.info(fields, msg)` would, byte for byte, with one JSON.stringify instead of pino's
 * key-by-key serializing (which cost more than a short request's histogram work); returns false, writing nothing,
 * wherever pino's text could differ (other loggers, pino-serialized keys, non-string/number values, ill-formed UTF-16).
 */
export function writeInfoLine(logger: Logger, fields: Readonly<Record<string, unknown>>, msg: string): boolean {
  // Only createLogger's own logger is in the map: a child's extra bindings are pino's to write.
  const destination = destinations.get(logger)
  if (destination === undefined) return false
  const bindings = (logger as unknown as Record<symbol, unknown>)[pino.symbols.chindingsSym]
  if (typeof bindings !== 'string') return false
  for (const key in fields) {
    const value = fields[key]
    if (typeof value === 'string') {
      if (!wellFormed(value)) return false
    } else if (typeof value !== 'number' && value !== undefined) return false
    if (pinoOwn(key)) return false
  }
  const json = JSON.stringify(fields)
  // pino: the level's cached prefix, `,"time":` + Date.now() (epochTime), the bindings, `,"key":value` per defined field, `,"msg":…}`.
  destination.write(
    `{"level":${logger.levels.values.info},"time":${Date.now()}${bindings}${json.length > 2 ? `,${json.slice(1, -1)}` : ''},"msg":${JSON.stringify(msg)}}\n`,
  )
  return true
}

/**
 * A pipe on `fd` reopened non-blocking (Linux: /proc/self/fd), else `fd`: a blocking pipe with a reader that never reads
 * holds a libuv thread in write(2), and Node's exit waits for it. Only a FIFO: a reopened file would lose its append offset.
 */
function nonBlockingPipe(fd: number): number {
  try {
    if (process.platform !== 'linux' || !fstatSync(fd).isFIFO()) return fd
    return openSync(`/proc/self/fd/${fd}`, constants.O_WRONLY | constants.O_NONBLOCK)
  } catch {
    return fd
  }
}

const FASTIFY_LISTENING = 'Server listening at '

/** The process logger on stdout (fd 1): JSON lines, credentials redacted; `base`: fields of every line (a cluster worker's pid). */
export function createLogger(config: Config, fd = 1, base?: Record<string, unknown>): Logger {
  const destination = new LogDestination(nonBlockingPipe(fd))
  const logger = pino(
    {
      level: config.log.level,
      base: base ?? undefined,
      // Replaced by tokentap's own start-up line with every URL (startup.ts).
      hooks: {
        logMethod(args, method) {
          if (typeof args[0] === 'string' && args[0].startsWith(FASTIFY_LISTENING)) return
          method.apply(this, args)
        },
      },
      // Belt and braces: should anything carry request headers, credentials are cut out. Their first keys are
      // pinoOwn's, so writeInfoLine leaves such lines to pino.
      redact: {
        paths: [
          'req.headers.authorization',
          'req.headers["x-api-key"]',
          'req.headers["api-key"]',
          'req.headers["x-goog-api-key"]',
          'req.headers["proxy-authorization"]',
          'req.headers.cookie',
          'res.headers["set-cookie"]',
          'headers.authorization',
          'headers["x-api-key"]',
          'headers.cookie',
        ],
        censor: '[REDACTED]',
      },
    },
    destination,
  )
  destinations.set(logger, destination)
  return logger
}

/** At shutdown: waits up to `timeoutMs` for the last lines to be written. A logger from elsewhere resolves at once. */
export async function closeLogger(logger: Logger, timeoutMs = 1000): Promise<void> {
  await destinations.get(logger)?.drain(timeoutMs)
}
