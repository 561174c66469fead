import cluster from 'node:cluster'
import type { Worker } from 'node:cluster'
import type { AddressInfo } from 'node:net'
import type { Logger } from 'pino'
import { buildAdmin } from '../admin/admin.ts'
import { monotonicNow } from '../clock.ts'
import type { Config } from '../config/schema.ts'
import { createLogger } from '../logger.ts'
import { MetricsRegistry } from '../metrics/prometheus/registry.ts'
import { groupLabelFold } from '../record/label-fold.ts'
import { announceListening, drainOnSignals, listenAs } from '../startup.ts'
import { clusterAdminSource } from './admin-source.ts'
import { ask, METRICS_TIMEOUT_MS, onWorkerEvents, workerForker } from './ipc.ts'
import { ClusterMetrics } from './metrics.ts'
import type { WorkerMetrics } from './metrics.ts'
import { OrphanRecorder, ProgressMirror } from './progress.ts'
import { ClusterViews } from './views.ts'

/**
 * Several cores, one pod (`server.workers` > 1): the primary forks workers that share the proxy
 * listener (https://nodejs.org/api/cluster.html) and serves the admin listener itself; a dead
 * worker is replaced and its reported counts kept, so sums never go down (a drop reads as a counter reset).
 */

/** Replacement back-off: a worker that dies within this of its start counts as a crash loop. */
const CRASH_WINDOW_MS = 5000
const MAX_RESTART_DELAY_MS = 10_000

/**
 * Forks `config.server.workers` workers, replaces any that die, serves the admin listener, and on a
 * drain signal has every worker drain and linger for the next scrape before the primary exits.
 */
export async function runPrimary(config: Config, logger: Logger = createLogger(config)): Promise<void> {
  const wanted = config.server.workers
  const listening = new Set<number>()
  let stopping = false
  let crashes = 0
  let announced = false
  const forkWorker = workerForker(config)

  // Only workers that listen: one still starting has counted nothing and would not answer yet.
  const workers = (): Worker[] =>
    Object.values(cluster.workers ?? {}).filter((w): w is Worker => w?.isConnected() === true && listening.has(w.id))

  const views = new ClusterViews({ stallSeconds: config.metrics.stall_seconds, startedAt: monotonicNow() })
  // What each worker has in flight, and the primary's own recording of a dead worker's requests.
  const progress = new ProgressMirror()
  const orphans = new OrphanRecorder(config, logger, views.live)
  const own = new MetricsRegistry({ processMetrics: config.metrics.process_metrics })
  const metrics = new ClusterMetrics(
    async () => {
      const live = workers()
      const answers = await Promise.allSettled(
        live.map((w) => ask(w, 'metrics', metrics.applied(w.id), METRICS_TIMEOUT_MS)),
      )
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
      own: [...orphans.metrics.all(), ...orphans.realtime.all()],
      processJson: () => own.processJson(),
      onReport: (workerId, report) => {
        if (report.progress !== undefined) progress.covered(workerId, report.progress)
      },
      fold: groupLabelFold(config, logger),
    },
  )
  const admin = buildAdmin(
    clusterAdminSource({
      config,
      logger,
      metrics,
      views,
      workers,
      // Not ready until every worker listens, nor while draining.
      draining: () => stopping || listening.size < wanted,
      now: monotonicNow,
    }),
  )

  function fork(): void {
    const worker = forkWorker()
    const started = Date.now()
    onWorkerEvents(worker, {
      progress: (batch) => {
        try {
          progress.onBatch(batch, worker.id)
        } catch (err) {
          logger.error({ err, worker: worker.id }, 'a worker’s progress batch could not be read')
        }
      },
      live: (batch) => {
        try {
          views.onMessage(batch, worker.id)
        } catch (err) {
          // A batch the primary cannot read costs the live page those requests, not the primary.
          logger.error({ err, worker: worker.id }, 'a worker’s live batch could not be read')
        }
      },
      listening: (address) => {
        listening.add(worker.id)
        if (announced || listening.size < wanted) return
        announced = true
        // The workers share one listener: the last one's address is every one's.
        announceListening(logger, config, address, admin.server.address() as AddressInfo, { workers: wanted })
      },
    })
    worker.on('exit', (code, signal) => {
      listening.delete(worker.id)
      // In one turn: its last report's counts kept, and every request of it no kept report counts recorded once.
      metrics.retire(worker.id)
      const now = monotonicNow()
      const detail = signal ?? `exit code ${code}`
      const lost = progress.exited(worker.id, now)
      if (lost.length > 0) {
        orphans.record(lost, detail)
        logger.error(
          { worker: worker.id, pid: worker.process.pid, requests: lost.length },
          'worker exited with requests in flight: recorded as failed (TOKENTAP_ERR_WORKER_EXITED)',
        )
      }
      const realtime = progress.realtime.exited(worker.id, now, 'TOKENTAP_ERR_WORKER_EXITED')
      orphans.recordRealtime(realtime, now, detail)
      if (realtime.open.length > 0)
        logger.error(
          {
            worker: worker.id,
            pid: worker.process.pid,
            sessions: realtime.open.length,
            responses: realtime.open.reduce((n, s) => n + s.responses.length, 0),
          },
          'worker exited with realtime sessions open: recorded as failed (TOKENTAP_ERR_WORKER_EXITED)',
        )
      views.workerGone(worker.id)
      if (stopping) return
      crashes = Date.now() - started < CRASH_WINDOW_MS ? crashes + 1 : 0
      const delay = crashes === 0 ? 0 : Math.min(MAX_RESTART_DELAY_MS, 100 * 2 ** crashes)
      logger.error(
        { worker: worker.id, pid: worker.process.pid, code, signal, restart_in_ms: delay },
        'worker died: starting a new one',
      )
      setTimeout(() => {
        if (!stopping) fork()
      }, delay).unref()
    })
  }

  await listenAs(
    'admin',
    () => admin.listen({ host: config.admin.host, port: config.admin.port }),
    config.admin.host,
    config.admin.port,
  )
  for (let i = 0; i < wanted; i++) fork()

  drainOnSignals(logger, async (signal) => {
    stopping = true
    const all = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined)
    logger.info({ signal, workers: all.length, drain_seconds: config.server.drain_seconds }, 'draining')
    for (const w of all) w.process.kill('SIGTERM')
    // Workers end their own streams at drain_seconds and linger (server.drain_linger_seconds)
    // for the primary's next scrape, which reads their last counts; this only covers one that hangs.
    const deadline = setTimeout(
      () => {
        for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGKILL')
      },
      (config.server.drain_seconds + config.server.drain_linger_seconds) * 1000 + 5000,
    )
    deadline.unref()
    const gone = (): boolean => Object.keys(cluster.workers ?? {}).length === 0
    if (!gone()) {
      await new Promise<void>((resolve) =>
        cluster.on('exit', () => {
          if (gone()) resolve()
        }),
      )
    }
    clearTimeout(deadline)
    await admin.close()
  })
}
