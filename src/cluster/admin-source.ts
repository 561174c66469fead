import type { Worker } from 'node:cluster'
import type { Logger } from 'pino'
import type { AdminSource } from '../admin/source.ts'
import type { Config } from '../config/schema.ts'
import type { MetricsSource } from '../metrics/prometheus/source.ts'
import { askAll } from './ipc.ts'
import type { ClusterViews } from './views.ts'
import { mergeStreams } from './views.ts'

/** While a live page is open, the workers' streams in flight are mirrored this often. */
const IN_FLIGHT_SYNC_MS = 1000

export interface ClusterAdminOptions {
  readonly config: Config
  readonly logger: Logger
  readonly metrics: MetricsSource
  readonly views: ClusterViews
  /** The workers that listen (one still starting has counted nothing and would not answer yet). */
  readonly workers: () => readonly Worker[]
  /** Draining, or not every worker listens yet. */
  readonly draining: () => boolean
  readonly now: () => number
}

/** The cluster primary's admin source: the same routes as one process, answered from the workers (a failing or late one is left out). */
export function clusterAdminSource(o: ClusterAdminOptions): AdminSource {
  const { views, logger } = o
  let syncTimer: NodeJS.Timeout | undefined
  const sync = (): void => {
    askAll(o.workers(), 'inflight', undefined, logger).then(
      (answers) => {
        for (const { worker, answer } of answers) views.onInFlight(answer, worker.id)
      },
      (err: unknown) => logger.error({ err }, 'mirroring the workers’ streams in flight failed'),
    )
  }
  return {
    config: o.config,
    logger,
    metrics: o.metrics,
    get draining() {
      return o.draining()
    },
    live: {
      store: views.live,
      active: views.active,
      inFlight: () => views.inFlight,
      now: o.now,
      watch: (watching) => {
        clearInterval(syncTimer)
        syncTimer = undefined
        if (!watching) return views.clearInFlight()
        sync()
        syncTimer = setInterval(sync, IN_FLIGHT_SYNC_MS).unref()
      },
      lookup: async (id) => {
        for (const { answer } of await askAll(o.workers(), 'request', id, logger)) if (answer !== null) return answer
        return null
      },
      searched: `any worker's last ${o.config.debug.recent_requests}`,
    },
    streams: async () => mergeStreams((await askAll(o.workers(), 'streams', undefined, logger)).map((a) => a.answer)),
  }
}
