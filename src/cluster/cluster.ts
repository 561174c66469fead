import cluster from 'node:cluster'
import type { Worker } from 'node:cluster'
import type { AddressInfo } from 'node:net'
import type { TokentapApp } from '../app.ts'
import type { Logger } from 'pino'
import { monotonicNow } from '../clock.ts'
import { TokentapError } from '../errors.ts'
import { closeLogger, createLogger } from '../logger.ts'
import { validateConfig } from '../config/load-config.ts'
import type { Config } from '../config/schema.ts'
import { buildAdmin } from '../admin/admin.ts'
import type { AdminState } from '../admin/admin.ts'
import { snapshotStreams } from '../admin/debug-streams.ts'
import type { StreamsSnapshot } from '../admin/debug-streams.ts'
import { ClusterMetrics, StateReporter } from './metrics.ts'
import { groupLabelFold } from '../record/label-fold.ts'
import type { WorkerMetrics } from './metrics.ts'
import { OrphanRecorder, PROGRESS_MS, ProgressMirror, WorkerProgress } from './progress.ts'
import type { ProgressBatch } from './progress.ts'
import { MetricsRegistry } from '../metrics/prometheus/registry.ts'
import { ClusterViews, lookupRequest, mergeStreams, WorkerViews } from './views.ts'
import type { InFlightDelta, LiveBatch } from './views.ts'
import { markScraped } from '../admin/linger.ts'
import { routeLabel } from '../proxy/open-exchange.ts'
import { announce, listenAs, serviceUrls } from '../startup.ts'

/**
 * Several cores, one pod (`server.workers: N` > 1): the primary forks N workers that share the
 * proxy listener (node:cluster hands connections out round-robin) and serves the admin listener
 * itself, the same routes as one process: /metrics merges every worker's metric state
 * (cluster/metrics.ts: histograms bucket by bucket from their HistogramCore state, exemplars
 * kept, OpenMetrics too), the live page reads a LiveStore the workers feed (cluster/views.ts),
 * /debug/streams and /debug/requests/{id} ask every worker. A worker that dies is replaced; the
 * counts it had reported at the last scrape are kept, so the sums never go down (a drop would
 * read as a counter reset to Prometheus). The IPC channel uses the structured clone
 * (`serialization: 'advanced'`): typed arrays and ±Infinity cross as they are.
 */

/** Messages on the cluster IPC channel. */
const ClusterMessage = {
  ask: 'tokentap:ask',
  answer: 'tokentap:answer',
  live: 'tokentap:live',
  progress: 'tokentap:progress',
  listening: 'tokentap:listening',
} as const

/** What the primary asks a worker, and what the worker answers. */
interface Questions {
  /** The number of the worker's last report the primary applied: the answer is what changed since (StateReporter). */
  metrics: { arg: number | undefined; answer: WorkerMetrics }
  streams: { arg: undefined; answer: StreamsSnapshot }
  request: { arg: string; answer: Record<string, unknown> | null }
  inflight: { arg: undefined; answer: InFlightDelta }
}
type Question = keyof Questions

interface Answer {
  readonly type: typeof ClusterMessage.answer
  readonly id: number
  readonly value?: unknown
  readonly error?: string
}

/** The primary hands its validated config to the workers, so they run exactly what it checked. */
const CONFIG_ENV = 'TOKENTAP_CLUSTER_CONFIG'

/** A worker that does not answer a metrics request within this fails the scrape (503). */
const METRICS_TIMEOUT_MS = 5000
/**
 * A worker that does not answer a debug question within this is left out of the answer (one that
 * dies or hangs mid-request must not hold the admin request, nor leave it pending for ever).
 */
const DEBUG_TIMEOUT_MS = 2000
/** While a live page is open, the workers' streams in flight are mirrored this often. */
const IN_FLIGHT_SYNC_MS = 1000

/** Replacement back-off: a worker that dies within this of its start counts as a crash loop. */
const CRASH_WINDOW_MS = 5000
const MAX_RESTART_DELAY_MS = 10_000

/** True in a process forked by `runPrimary`. */
export function isClusterWorker(): boolean {
  return cluster.isWorker && process.env[CONFIG_ENV] !== undefined
}

/** The config the primary validated (in a worker). */
export function workerConfig(): Config {
  return validateConfig(JSON.parse(process.env[CONFIG_ENV] as string))
}

/**
 * Worker side: answers the primary's questions (its metric state, its streams, a request by id,
 * its streams in flight), sends it what feeds the live page, and tells it where the proxy
 * listens. Call after `app.listen`.
 */
export function serveWorker(app: TokentapApp): void {
  const tt = app.tokentap
  const send = (msg: object): void => {
    // The primary gone (the channel closed) is the primary's exit: nothing to tell.
    if (!process.connected) return
    try {
      process.send?.(msg)
    } catch (err) {
      // A message the channel cannot carry is lost, never the worker (its streams go on).
      tt.logger.error({ err }, 'a message to the cluster primary could not be sent')
    }
  }
  const views = new WorkerViews((batch: LiveBatch) => send({ type: ClusterMessage.live, batch }))
  tt.live.onAdd(views.finished)
  tt.realtime.listen(views.realtime)
  const progress = new WorkerProgress(tt.active, (batch: ProgressBatch) => send({ type: ClusterMessage.progress, batch }))
  const reporter = new StateReporter()
  setInterval(() => progress.flush(), PROGRESS_MS).unref()
  const answer = async (what: Question, arg: unknown): Promise<unknown> => {
    switch (what) {
      case 'metrics': {
        // The primary scrapes through this: after its drain the worker lingers for the next scrape.
        markScraped(tt.registry)
        // The batch first, then the state in the same turn: every request ended in it or before is counted in this state.
        const seq = progress.flush()
        const state = reporter.report(tt.registry.families, arg as number | undefined)
        return { ...state, process: await tt.registry.processJson(), progress: seq } satisfies WorkerMetrics
      }
      case 'streams':
        return snapshotStreams(tt.active, tt.now())
      case 'request':
        return lookupRequest(tt.live, String(arg), tt.now())
      case 'inflight':
        return views.inFlight(tt.active, tt.realtime.open)
    }
  }
  process.on('message', (msg: { type?: unknown; id?: unknown; what?: unknown; arg?: unknown }) => {
    if (msg?.type !== ClusterMessage.ask) return
    const id = msg.id as number
    answer(msg.what as Question, msg.arg).then(
      (value) => send({ type: ClusterMessage.answer, id, value }),
      (err: unknown) => send({ type: ClusterMessage.answer, id, error: String(err) }),
    )
  })
  const address = app.server.address() as AddressInfo | null
  send({ type: ClusterMessage.listening, port: address?.port })
}

/**
 * Primary side: forks `config.server.workers` workers, replaces any that die, serves the admin
 * listener with aggregated metrics, and on SIGTERM/SIGINT/SIGHUP/SIGUSR2 drains: /readyz turns 503, every
 * worker gets SIGTERM and drains its streams (`server.drain_seconds`), lingers for the next scrape
 * if the primary has scraped it (`server.drain_linger_seconds`), and exits; then the primary exits.
 */
export async function runPrimary(config: Config, logger: Logger = createLogger(config)): Promise<void> {
  const wanted = config.server.workers
  const listening = new Set<number>()
  let stopping = false
  let crashes = 0
  let proxyPort: number | undefined
  let announced = false
  let nextQuestion = 0

  // Only workers that listen: one still starting has counted nothing and would not answer yet.
  const workers = (): Worker[] => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w?.isConnected() === true && listening.has(w.id))

  /** Asks one worker; rejects when it answers with an error, exits first, or takes longer than `timeoutMs`. */
  function ask<Q extends Question>(worker: Worker, what: Q, arg: Questions[Q]['arg'], timeoutMs: number): Promise<Questions[Q]['answer']> {
    const id = nextQuestion++
    return new Promise((resolve, reject) => {
      const onMessage = (msg: Answer): void => {
        if (msg?.type !== ClusterMessage.answer || msg.id !== id) return
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
      worker.send({ type: ClusterMessage.ask, id, what, arg }, (err: Error | null) => {
        if (err !== null) onExit()
      })
    })
  }

  /** Every listening worker's answer; one that fails or is late is left out (debug views only). */
  async function askAll<Q extends Question>(what: Q, arg: Questions[Q]['arg']): Promise<{ worker: Worker; answer: Questions[Q]['answer'] }[]> {
    const live = workers()
    const answers = await Promise.allSettled(live.map((w) => ask(w, what, arg, DEBUG_TIMEOUT_MS)))
    const out: { worker: Worker; answer: Questions[Q]['answer'] }[] = []
    answers.forEach((a, i) => {
      if (a.status === 'fulfilled') out.push({ worker: live[i], answer: a.value })
      else logger.debug({ err: a.reason }, 'a worker left out of a debug view')
    })
    return out
  }

  const views = new ClusterViews({ stallSeconds: config.metrics.stall_seconds, startedAt: monotonicNow() })
  // What each worker has in flight, and the primary's own recording of a dead worker's requests.
  const progress = new ProgressMirror()
  const orphans = new OrphanRecorder(config, logger, views.live)
  const own = new MetricsRegistry({ processMetrics: config.metrics.process_metrics })
  const metrics = new ClusterMetrics(
    async () => {
      const live = workers()
      const answers = await Promise.allSettled(live.map((w) => ask(w, 'metrics', metrics.applied(w.id), METRICS_TIMEOUT_MS)))
      const reports: WorkerMetrics[] = []
      const workerIds: number[] = []
      answers.forEach((a, i) => {
        if (a.status === 'fulfilled') {
          reports.push(a.value)
          workerIds.push(live[i].id)
        } else if (!live[i].isDead()) {
          // A live worker failing fails the scrape: a partial sum would read as counter resets.
          throw a.reason
        }
        // One that exited meanwhile is in the sums through what it left (ClusterMetrics#retire).
      })
      return { reports, workerIds }
    },
    {
      own: orphans.metrics.all(),
      processJson: () => own.processJson(),
      onReport: (workerId, report) => {
        if (report.progress !== undefined) progress.covered(workerId, report.progress)
      },
      fold: groupLabelFold(config, logger),
    },
  )
  let syncTimer: NodeJS.Timeout | undefined
  const sync = (): void => {
    askAll('inflight', undefined).then(
      (answers) => {
        for (const { worker, answer } of answers) views.onInFlight(answer, worker.id)
      },
      (err: unknown) => logger.error({ err }, 'mirroring the workers’ streams in flight failed'),
    )
  }

  const state: AdminState = {
    config,
    logger,
    registry: metrics,
    now: monotonicNow,
    live: views.live,
    active: undefined,
    cluster: {
      active: views.active,
      inFlight: () => views.inFlight,
      watch: (watching) => {
        clearInterval(syncTimer)
        syncTimer = undefined
        if (!watching) return views.clearInFlight()
        sync()
        syncTimer = setInterval(sync, IN_FLIGHT_SYNC_MS).unref()
      },
      lookup: async (id) => {
        for (const { answer } of await askAll('request', id)) if (answer !== null) return answer
        return null
      },
      streams: async () => mergeStreams((await askAll('streams', undefined)).map((a) => a.answer)),
    },
    // Not ready until every worker listens, nor while draining.
    get draining() {
      return stopping || listening.size < wanted
    },
  }
  const admin = buildAdmin(state)

  function fork(): void {
    const worker = cluster.fork({ [CONFIG_ENV]: JSON.stringify(config) })
    const started = Date.now()
    worker.on('message', (msg: { type?: unknown; port?: unknown; batch?: unknown }) => {
      if (msg?.type === ClusterMessage.progress) {
        try {
          progress.onBatch(msg.batch as ProgressBatch, worker.id)
        } catch (err) {
          logger.error({ err, worker: worker.id }, 'a worker’s progress batch could not be read')
        }
        return
      }
      if (msg?.type === ClusterMessage.live) {
        try {
          views.onMessage(msg.batch as LiveBatch, worker.id)
        } catch (err) {
          // A batch the primary cannot read costs the live page those requests, not the primary.
          logger.error({ err, worker: worker.id }, 'a worker’s live batch could not be read')
        }
        return
      }
      if (msg?.type !== ClusterMessage.listening) return
      listening.add(worker.id)
      if (typeof msg.port === 'number') proxyPort = msg.port
      if (!announced && listening.size >= wanted) {
        announced = true
        const adminPort = (admin.server.address() as AddressInfo).port
        const urls = serviceUrls(
          config,
          { address: config.server.host, family: config.server.host.includes(':') ? 'IPv6' : 'IPv4', port: proxyPort ?? config.server.port },
          admin.server.address() as AddressInfo,
        )
        logger.info(
          { proxy: `${config.server.host}:${proxyPort}`, admin: `${config.admin.host}:${adminPort}`, workers: wanted, routes: config.routes.map(routeLabel), metrics: urls.metrics, live: urls.live },
          'tokentap listening',
        )
        announce(urls)
      }
    })
    worker.on('exit', (code, signal) => {
      listening.delete(worker.id)
      // In one turn: its last report's counts kept, and every request of it no kept report counts recorded once.
      metrics.retire(worker.id)
      const lost = progress.exited(worker.id, monotonicNow())
      if (lost.length > 0) {
        orphans.record(lost, signal ?? `exit code ${code}`)
        logger.error({ worker: worker.id, pid: worker.process.pid, requests: lost.length }, 'worker exited with requests in flight: recorded as failed (TOKENTAP_ERR_WORKER_EXITED)')
      }
      views.workerGone(worker.id)
      if (stopping) return
      crashes = Date.now() - started < CRASH_WINDOW_MS ? crashes + 1 : 0
      const delay = crashes === 0 ? 0 : Math.min(MAX_RESTART_DELAY_MS, 100 * 2 ** crashes)
      logger.error({ worker: worker.id, pid: worker.process.pid, code, signal, restart_in_ms: delay }, 'worker died: starting a new one')
      setTimeout(() => {
        if (!stopping) fork()
      }, delay).unref()
    })
  }

  await listenAs('admin', () => admin.listen({ host: config.admin.host, port: config.admin.port }), config.admin.host, config.admin.port)
  // Typed arrays (the histograms' buckets, the chunk marks) and ±Infinity cross as they are.
  cluster.setupPrimary({ serialization: 'advanced' })
  for (let i = 0; i < wanted; i++) fork()

  const drain = (signal: string): void => {
    if (stopping) return
    stopping = true
    const live = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined)
    logger.info({ signal, workers: live.length, drain_seconds: config.server.drain_seconds }, 'draining')
    for (const w of live) w.process.kill('SIGTERM')
    // Workers end their own streams at drain_seconds and linger (server.drain_linger_seconds)
    // for the primary's next scrape, which reads their last counts; this only covers one that hangs.
    const deadline = setTimeout(
      () => {
        for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGKILL')
      },
      (config.server.drain_seconds + config.server.drain_linger_seconds) * 1000 + 5000,
    )
    deadline.unref()
    const finish = async (): Promise<void> => {
      clearTimeout(deadline)
      await admin.close()
      logger.info('stopped')
      await closeLogger(logger, 1000)
      process.exit(0)
    }
    if (Object.keys(cluster.workers ?? {}).length === 0) void finish()
    else
      cluster.on('exit', () => {
        if (Object.keys(cluster.workers ?? {}).length === 0) void finish()
      })
  }
  // SIGHUP and SIGUSR2 drain too (see server.ts): they would otherwise end the primary at once.
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR2'] as const) process.once(signal, () => drain(signal))
}
