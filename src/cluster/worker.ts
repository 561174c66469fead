import type { AddressInfo } from 'node:net'
import type { BuildOptions, TokentapApp } from '../app.ts'
import { snapshotStreams } from '../admin/debug-streams.ts'
import { markScraped } from '../admin/linger.ts'
import { lookupRequest } from '../admin/source.ts'
import type { Config } from '../config/schema.ts'
import { createLogger } from '../logger.ts'
import { primaryChannel } from './ipc.ts'
import { StateReporter } from './metrics.ts'
import { PROGRESS_MS, WorkerProgress } from './progress.ts'
import { WorkerViews } from './views.ts'

/**
 * How a worker builds its app: its lines carry its pid (pino's own field name: which worker logged
 * is otherwise lost), and the primary, not each worker, warns of label folds once for the group.
 */
export function workerAppOptions(config: Config): BuildOptions {
  return { logger: createLogger(config, 1, { pid: process.pid }), warnOnFold: false }
}

/**
 * A cluster worker: the proxy listener as in one process, and instead of an admin listener the
 * answers to the primary's questions and the batches that feed its live page. Call after `app.listen`.
 */
export function serveWorker(app: TokentapApp): void {
  const tt = app.tokentap
  const primary = primaryChannel(tt.logger)
  const views = new WorkerViews(primary.live)
  tt.live.onAdd(views.finished)
  tt.realtime.listen(views.realtime)
  const progress = new WorkerProgress(tt.active, primary.progress, tt.realtime)
  setInterval(() => progress.flush(), PROGRESS_MS).unref()
  const reporter = new StateReporter()
  primary.answerWith({
    metrics: async (applied) => {
      // The primary scrapes through this: after its drain the worker lingers for the next scrape.
      markScraped(tt.registry)
      // The batch first, then the state in the same turn: every request ended in it or before is counted in this state.
      const seq = progress.flush()
      const state = reporter.report(tt.registry.families, applied)
      return { ...state, process: await tt.registry.processJson(), progress: seq }
    },
    streams: () => snapshotStreams(tt.active, tt.now()),
    request: (id) => lookupRequest(tt.live, id, tt.now()),
    inflight: () => views.inFlight(tt.active, tt.realtime.open),
  })
  primary.listening(app.server.address() as AddressInfo)
}
