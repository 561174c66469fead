import cluster from 'node:cluster'
import type { Worker } from 'node:cluster'
import type { AddressInfo } from 'node:net'
import { AggregatorRegistry } from 'prom-client'
import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { monotonicNow } from './clock.ts'
import { TokentapError } from './errors.ts'
import { closeLogger, createLogger } from './logger.ts'
import { validateConfig } from './config/load-config.ts'
import type { Config } from './config/schema.ts'
import { buildAdmin } from './admin/admin.ts'
import type { AdminState } from './admin/admin.ts'
import type { MetricJson } from './metrics/metric.ts'
import { wholeTextSource } from './metrics/source.ts'
import { routeLabel } from './proxy/open-exchange.ts'

/**
 * Several cores, one pod (`server.workers: N` > 1): the primary forks N workers that share the
 * proxy listener (node:cluster hands connections out round-robin), serves the admin listener
 * itself and answers /metrics by asking every worker for its metrics (each family's `get()` JSON,
 * prom-client's shape, over the cluster IPC channel) and summing them with prom-client's
 * AggregatorRegistry (which also knows how to combine the process metrics): counters and
 * in-flight gauges add up, histograms add bucket by bucket, so one scrape is one consistent set.
 * A worker that dies is replaced; the counts it had reported at the last scrape are kept, so the
 * sums never go down (a drop would read as a counter reset to Prometheus).
 */

/** Messages on the cluster IPC channel (prom-client's own use different `type`s). */
const ClusterMessage = {
  metricsRequest: 'tokentap:metrics-request',
  metricsResponse: 'tokentap:metrics-response',
  listening: 'tokentap:listening',
} as const

/** The primary hands its validated config to the workers, so they run exactly what it checked. */
const CONFIG_ENV = 'TOKENTAP_CLUSTER_CONFIG'

/** A worker that does not answer a metrics request within this fails the scrape (503). */
const METRICS_TIMEOUT_MS = 5000

/** Replacement back-off: a worker that dies within this of its start counts as a crash loop. */
const CRASH_WINDOW_MS = 5000
const MAX_RESTART_DELAY_MS = 10_000

interface MetricsResponse {
  readonly type: typeof ClusterMessage.metricsResponse
  readonly id: number
  readonly metrics?: MetricJson[]
  readonly error?: string
}

/** True in a process forked by `runPrimary`. */
export function isClusterWorker(): boolean {
  return cluster.isWorker && process.env[CONFIG_ENV] !== undefined
}

/** The config the primary validated (in a worker). */
export function workerConfig(): Config {
  return validateConfig(JSON.parse(process.env[CONFIG_ENV] as string))
}

/**
 * Worker side: answers the primary's metrics requests with this process's metrics and tells it
 * where the proxy listens. Call after `app.listen`.
 */
export function serveWorker(app: FastifyInstance): void {
  process.on('message', (msg: { type?: unknown; id?: unknown }) => {
    if (msg?.type !== ClusterMessage.metricsRequest) return
    const id = msg.id as number
    app.tokentap.registry.json().then(
      (metrics) => process.send?.({ type: ClusterMessage.metricsResponse, id, metrics }),
      (err: unknown) => process.send?.({ type: ClusterMessage.metricsResponse, id, error: String(err) }),
    )
  })
  const address = app.server.address() as AddressInfo | null
  process.send?.({ type: ClusterMessage.listening, port: address?.port })
}

/** Only what keeps counting: a dead worker's counters and histograms, not its gauges or process metrics. */
function retainable(m: MetricJson): boolean {
  return m.name.startsWith('llm_') && (m.type === 'counter' || m.type === 'histogram')
}

/**
 * Primary side: forks `config.server.workers` workers, replaces any that die, serves the admin
 * listener with aggregated metrics, and on SIGTERM/SIGINT/SIGHUP/SIGUSR2 drains: /readyz turns 503, every
 * worker gets SIGTERM and drains its streams (`server.drain_seconds`), then the primary exits.
 */
export async function runPrimary(config: Config, logger: Logger = createLogger(config)): Promise<void> {
  const wanted = config.server.workers
  const listening = new Set<number>()
  const lastReport = new Map<number, MetricJson[]>()
  let retired: MetricJson[] = []
  let stopping = false
  let crashes = 0
  let proxyPort: number | undefined
  let announced = false
  let nextRequest = 0

  const state: AdminState = {
    config,
    logger,
    // Summed as text: Prometheus format only (no exemplars to merge across workers).
    registry: wholeTextSource(() => collect()),
    now: monotonicNow,
    // Not ready until every worker listens, nor while draining.
    get draining() {
      return stopping || listening.size < wanted
    },
  }
  const admin = buildAdmin(state)

  // Only workers that listen: one still starting has counted nothing and would not answer yet.
  const workers = (): Worker[] => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w?.isConnected() === true && listening.has(w.id))

  function ask(worker: Worker, id: number): Promise<MetricJson[]> {
    return new Promise((resolve, reject) => {
      const onMessage = (msg: MetricsResponse): void => {
        if (msg?.type !== ClusterMessage.metricsResponse || msg.id !== id) return
        done()
        if (msg.error !== undefined || msg.metrics === undefined) reject(new TokentapError('TOKENTAP_ERR_WORKER', worker.id, msg.error ?? 'no metrics'))
        else resolve(msg.metrics)
      }
      const onExit = (): void => {
        done()
        reject(new TokentapError('TOKENTAP_ERR_WORKER', worker.id, 'exited during a scrape'))
      }
      const timer = setTimeout(() => {
        done()
        reject(new TokentapError('TOKENTAP_ERR_WORKER', worker.id, `did not answer within ${METRICS_TIMEOUT_MS} ms`))
      }, METRICS_TIMEOUT_MS)
      const done = (): void => {
        clearTimeout(timer)
        worker.off('message', onMessage)
        worker.off('exit', onExit)
      }
      worker.on('message', onMessage)
      worker.once('exit', onExit)
      worker.send({ type: ClusterMessage.metricsRequest, id })
    })
  }

  async function collect(): Promise<string> {
    const id = nextRequest++
    const live = workers()
    const reports = await Promise.all(live.map((w) => ask(w, id)))
    for (let i = 0; i < live.length; i++) lastReport.set(live[i].id, reports[i])
    return AggregatorRegistry.aggregate([...reports, retired]).metrics()
  }

  // Synchronous (the aggregated metrics' get() returns plain values), so no scrape sees the
  // dead worker's counts missing from both the live reports and `retired`.
  function retire(workerId: number): void {
    const report = lastReport.get(workerId)
    lastReport.delete(workerId)
    if (report === undefined) return
    const merged = AggregatorRegistry.aggregate([retired, report.filter(retainable)]).getMetricsAsArray() as unknown as { get(): MetricJson }[]
    retired = merged.map((m) => m.get())
  }

  function fork(): void {
    const worker = cluster.fork({ [CONFIG_ENV]: JSON.stringify(config) })
    const started = Date.now()
    worker.on('message', (msg: { type?: unknown; port?: unknown }) => {
      if (msg?.type !== ClusterMessage.listening) return
      listening.add(worker.id)
      if (typeof msg.port === 'number') proxyPort = msg.port
      if (!announced && listening.size >= wanted) {
        announced = true
        const adminPort = (admin.server.address() as AddressInfo).port
        logger.info({ proxy: `${config.server.host}:${proxyPort}`, admin: `${config.admin.host}:${adminPort}`, workers: wanted, routes: config.routes.map(routeLabel) }, 'tokentap listening')
      }
    })
    worker.on('exit', (code, signal) => {
      listening.delete(worker.id)
      retire(worker.id)
      if (stopping) return
      crashes = Date.now() - started < CRASH_WINDOW_MS ? crashes + 1 : 0
      const delay = crashes === 0 ? 0 : Math.min(MAX_RESTART_DELAY_MS, 100 * 2 ** crashes)
      logger.error({ worker: worker.id, pid: worker.process.pid, code, signal, restart_in_ms: delay }, 'worker died: starting a new one')
      setTimeout(() => {
        if (!stopping) fork()
      }, delay).unref()
    })
  }

  await admin.listen({ host: config.admin.host, port: config.admin.port })
  for (let i = 0; i < wanted; i++) fork()

  const drain = (signal: string): void => {
    if (stopping) return
    stopping = true
    const live = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined)
    logger.info({ signal, workers: live.length, drain_seconds: config.server.drain_seconds }, 'draining')
    for (const w of live) w.process.kill('SIGTERM')
    // Workers end their own streams at drain_seconds; this only covers one that hangs.
    const deadline = setTimeout(
      () => {
        for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGKILL')
      },
      config.server.drain_seconds * 1000 + 5000,
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
