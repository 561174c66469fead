import { Worker } from 'node:worker_threads'
import type { Logger } from 'pino'
import type { SpanRecord } from './span-export.ts'
import { SpanBatch } from './span-record-protobuf.ts'
import type { SpanDescription } from './span-out.ts'

/**
 * The main thread's end of the span export: each kept span is written as OTLP protobuf when its
 * request ends (span-record-protobuf.ts), and the bytes go in batches to one worker thread
 * (trace-worker.ts) that runs the SDK's batch processor and OTLP exporter on them. The export's
 * HTTP client, timers and objects then never run in the proxy's isolate, where their shapes made
 * V8 drop and rebuild the byte path's optimised code (docs/performance.md, "Spans: what tracing
 * costs"). The byte path never waits for it: posting transfers the batch's buffer and returns.
 */

/** What the worker needs to build its exporter. */
export interface TraceThreadSettings {
  readonly url: string | undefined
  readonly headers: Record<string, string> | undefined
  readonly timeoutMillis: number | undefined
}

export type ToTraceThread =
  | {
      readonly kind: 'spans'
      /** ScopeSpans' `spans` fields end to end, one per written span. */
      readonly bytes: Uint8Array | undefined
      /** The spans the SDK must read (span-record-protobuf.ts). */
      readonly records: readonly SpanRecord[]
    }
  | { readonly kind: 'flush' | 'shutdown'; readonly id: number }

export type FromTraceThread =
  | { readonly kind: 'failed'; readonly err: string | undefined }
  | { readonly kind: 'recovered' }
  | { readonly kind: 'done'; readonly id: number; readonly err: string | undefined }

/** Spans posted at once: one message and one wake-up of the worker per batch. */
const BATCH = 64
/** A smaller batch waits at most this long (the worker's batch processor then waits up to its 5 s). */
const BATCH_WAIT_MS = 1000

// Run from the sources (tap's TypeScript loader), the worker is the .ts file beside this one.
const WORKER = new URL(import.meta.url.endsWith('.ts') ? './trace-worker.ts' : './trace-worker.js', import.meta.url)

export class TraceThread {
  readonly #worker: Worker
  readonly #logger: Logger
  readonly #batch = new SpanBatch()
  #timer: NodeJS.Timeout | undefined
  /** Flushes and the shutdown the worker has not answered yet, by id. */
  readonly #waiting = new Map<number, () => void>()
  #seq = 0
  #running = true

  constructor(settings: TraceThreadSettings, logger: Logger) {
    this.#logger = logger
    this.#worker = new Worker(WORKER, { workerData: settings })
    // Idle, the thread keeps no process alive; it is held only while a flush or the shutdown waits for it.
    this.#worker.unref()
    this.#worker.on('message', (m: FromTraceThread) => this.#message(m))
    this.#worker.on('error', (err) =>
      logger.error({ err }, 'the OTLP traces thread failed: spans are no longer exported'),
    )
    this.#worker.on('exit', () => {
      this.#running = false
      this.#batch.take()
      for (const done of this.#waiting.values()) done()
      this.#waiting.clear()
    })
  }

  #message(m: FromTraceThread): void {
    if (m.kind === 'failed') this.#logger.warn({ err: m.err }, 'OTLP traces export failed')
    else if (m.kind === 'recovered') this.#logger.info('OTLP traces export works again')
    else {
      if (m.err !== undefined) this.#logger.debug({ err: m.err }, 'OTLP traces flush failed')
      this.#waiting.get(m.id)?.()
      this.#waiting.delete(m.id)
      if (this.#waiting.size === 0) this.#worker.unref()
    }
  }

  /** A span, written from its figures. */
  write(describe: SpanDescription): void {
    if (!this.#running) return
    this.#batch.write(describe)
    if (this.#batch.size >= BATCH) this.#post()
    else this.#timer ??= setTimeout(() => this.#post(), BATCH_WAIT_MS).unref()
  }

  #post(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
    if (this.#batch.size === 0 || !this.#running) return
    const { bytes, records } = this.#batch.take()
    this.#worker.postMessage(
      { kind: 'spans', bytes, records } satisfies ToTraceThread,
      bytes === undefined ? [] : [bytes.buffer],
    )
  }

  /** Resolves once the worker has done `kind` with every span added before (or has stopped). */
  #ask(kind: 'flush' | 'shutdown'): Promise<void> {
    this.#post()
    if (!this.#running) return Promise.resolve()
    const id = this.#seq++
    this.#worker.ref()
    const answered = new Promise<void>((resolve) => this.#waiting.set(id, resolve))
    this.#worker.postMessage({ kind, id } satisfies ToTraceThread)
    return answered
  }

  /** Exports the spans added so far. Never throws. */
  flush(): Promise<void> {
    return this.#ask('flush')
  }

  /** Exports what is left and stops the thread. Never throws. */
  async shutdown(): Promise<void> {
    await this.#ask('shutdown')
    await this.#worker.terminate()
  }
}
