import cluster from 'node:cluster'
import type { Worker } from 'node:cluster'
import type { AddressInfo } from 'node:net'
import type { Logger } from 'pino'
import type { StreamsSnapshot } from '../admin/debug-streams.ts'
import { validateConfig } from '../config/load-config.ts'
import type { Config } from '../config/schema.ts'
import { TokentapError } from '../errors.ts'
import type { WorkerMetrics } from './metrics.ts'
import type { ProgressBatch } from './progress.ts'
import type { InFlightDelta, LiveBatch } from './views.ts'

/** The cluster's IPC channel, both ends; `serialization: 'advanced'` carries typed arrays and ±Infinity as they are. */

const MessageType = {
  ask: 'tokentap:ask',
  answer: 'tokentap:answer',
  live: 'tokentap:live',
  progress: 'tokentap:progress',
  listening: 'tokentap:listening',
} as const

export interface Questions {
  /** The number of the worker's last report the primary applied: the answer is what changed since (StateReporter). */
  metrics: { arg: number | undefined; answer: WorkerMetrics }
  streams: { arg: undefined; answer: StreamsSnapshot }
  request: { arg: string; answer: Record<string, unknown> | null }
  inflight: { arg: undefined; answer: InFlightDelta }
}
export type Question = keyof Questions

type Answers = {
  readonly [Q in Question]: (arg: Questions[Q]['arg']) => Questions[Q]['answer'] | Promise<Questions[Q]['answer']>
}

interface Ask {
  readonly type: typeof MessageType.ask
  readonly id: number
  readonly what: Question
  readonly arg: unknown
}

type WorkerMessage =
  | { readonly type: typeof MessageType.answer; readonly id: number; readonly value?: unknown; readonly error?: string }
  | { readonly type: typeof MessageType.live; readonly batch: LiveBatch }
  | { readonly type: typeof MessageType.progress; readonly batch: ProgressBatch }
  | { readonly type: typeof MessageType.listening; readonly address: AddressInfo }

/** A worker that does not answer a metrics question within this fails the scrape (503). */
export const METRICS_TIMEOUT_MS = 5000
/** A worker that does not answer a debug question within this is left out, so a hung one cannot hold the admin request. */
const DEBUG_TIMEOUT_MS = 2000

/** The primary hands its validated config to the workers, so they run exactly what it checked. */
const CONFIG_ENV = 'TOKENTAP_CLUSTER_CONFIG'

/** True in a process forked by the primary. */
export function isClusterWorker(): boolean {
  return cluster.isWorker && process.env[CONFIG_ENV] !== undefined
}

/** The config the primary validated (in a worker). */
export function workerConfig(): Config {
  return validateConfig(JSON.parse(process.env[CONFIG_ENV] as string))
}

/**
 * Sets the primary up once for workers that run `config` over the advanced-serialization channel,
 * and returns how to fork one (the first ones and each replacement).
 */
export function workerForker(config: Config): () => Worker {
  // Typed arrays (the histograms' buckets, the chunk marks) and ±Infinity cross as they are.
  cluster.setupPrimary({ serialization: 'advanced' })
  const env = { [CONFIG_ENV]: JSON.stringify(config) }
  return () => cluster.fork(env)
}

// ---- the primary's end ----

let nextQuestion = 0

/** Asks one worker; rejects when it answers with an error, exits first, or takes longer than `timeoutMs`. */
export function ask<Q extends Question>(
  worker: Worker,
  what: Q,
  arg: Questions[Q]['arg'],
  timeoutMs: number,
): Promise<Questions[Q]['answer']> {
  const id = nextQuestion++
  return new Promise((resolve, reject) => {
    const onMessage = (msg: WorkerMessage): void => {
      if (msg?.type !== MessageType.answer || msg.id !== id) return
      done()
      if (msg.error !== undefined) reject(new TokentapError('TOKENTAP_ERR_WORKER', worker.id, msg.error))
      else resolve(msg.value as Questions[Q]['answer'])
    }
    const onExit = (): void => {
      done()
      reject(new TokentapError('TOKENTAP_ERR_WORKER', worker.id, `exited before answering (${what})`))
    }
    const timer = setTimeout(() => {
      done()
      reject(new TokentapError('TOKENTAP_ERR_WORKER', worker.id, `did not answer within ${timeoutMs} ms (${what})`))
    }, timeoutMs)
    const done = (): void => {
      clearTimeout(timer)
      worker.off('message', onMessage)
      worker.off('exit', onExit)
    }
    worker.on('message', onMessage)
    worker.once('exit', onExit)
    worker.send({ type: MessageType.ask, id, what, arg } satisfies Ask, (err: Error | null) => {
      if (err !== null) onExit()
    })
  })
}

/** Every given worker's answer to a debug question; one that fails or is late is left out. */
export async function askAll<Q extends Question>(
  workers: readonly Worker[],
  what: Q,
  arg: Questions[Q]['arg'],
  logger: Logger,
): Promise<{ worker: Worker; answer: Questions[Q]['answer'] }[]> {
  const answers = await Promise.allSettled(workers.map((w) => ask(w, what, arg, DEBUG_TIMEOUT_MS)))
  const out: { worker: Worker; answer: Questions[Q]['answer'] }[] = []
  answers.forEach((a, i) => {
    if (a.status === 'fulfilled') out.push({ worker: workers[i], answer: a.value })
    else logger.debug({ err: a.reason }, 'a worker left out of a debug view')
  })
  return out
}

/** What a worker tells its primary unasked (the worker sends these, the primary handles them). */
export interface WorkerEvents {
  /** Finished requests and realtime events for the live page (views.ts). */
  readonly live: (batch: LiveBatch) => void
  /** Its requests in flight and how they ended (progress.ts). */
  readonly progress: (batch: ProgressBatch) => void
  /** Its proxy listener is bound, here. */
  readonly listening: (address: AddressInfo) => void
}

/** Routes a worker's unasked messages to `events` (answers go to `ask`'s own listener). */
export function onWorkerEvents(worker: Worker, events: WorkerEvents): void {
  worker.on('message', (msg: WorkerMessage) => {
    switch (msg?.type) {
      case MessageType.live:
        return events.live(msg.batch)
      case MessageType.progress:
        return events.progress(msg.batch)
      case MessageType.listening:
        return events.listening(msg.address)
    }
  })
}

// ---- a worker's end ----

/** A worker's end of the channel: what it sends unasked, and how it answers. */
export interface PrimaryChannel extends WorkerEvents {
  answerWith(answers: Answers): void
}

export function primaryChannel(logger: Logger): PrimaryChannel {
  const send = (msg: WorkerMessage): void => {
    // The primary gone (the channel closed) is the primary's exit: nothing to tell.
    if (!process.connected) return
    try {
      process.send?.(msg)
    } catch (err) {
      // A message the channel cannot carry is lost, never the worker (its streams go on).
      logger.error({ err }, 'a message to the cluster primary could not be sent')
    }
  }
  return {
    live: (batch) => send({ type: MessageType.live, batch }),
    progress: (batch) => send({ type: MessageType.progress, batch }),
    listening: (address) => send({ type: MessageType.listening, address }),
    answerWith(answers) {
      process.on('message', (msg: Ask) => {
        if (msg?.type !== MessageType.ask) return
        const id = msg.id
        // A throw inside an answer is an answer too: the primary's question never waits for its timeout.
        Promise.resolve()
          .then(() => answers[msg.what](msg.arg as never))
          .then(
            (value) => send({ type: MessageType.answer, id, value }),
            (err: unknown) => send({ type: MessageType.answer, id, error: String(err) }),
          )
      })
    },
  }
}
