import type { AddressInfo } from 'node:net'
import { buildApp } from './app.ts'
import { outcomeOf, parseCli } from './cli.ts'
import { isClusterWorker, workerConfig } from './cluster/ipc.ts'
import { runPrimary } from './cluster/primary.ts'
import { serveWorker, workerAppOptions } from './cluster/worker.ts'
import type { Config } from './config/schema.ts'
import { TokentapError } from './errors.ts'
import { announceListening, drainOnSignals, listenAs } from './startup.ts'

/**
 * The process (`npm start`, via src/bin.ts): config from the command line (src/cli.ts), then the
 * app listens and drains on a signal (startup.ts, docs on `server.drain_seconds`); with
 * `server.workers` > 1 this process is the cluster primary (src/cluster/primary.ts).
 */

async function main(): Promise<void> {
  const worker = isClusterWorker()
  let config: Config
  if (worker) config = workerConfig()
  else {
    const cmd = parseCli(process.argv.slice(2), process.env)
    if (cmd.kind !== 'run') {
      // --help, a usage mistake or a bad config: a message and an exit code, never a stack trace.
      const { stream, text, code } = outcomeOf(cmd)
      process[stream].once('error', () => process.exit(code))
      process[stream].write(text, () => process.exit(code))
      return
    }
    config = cmd.config
    if (config.server.workers > 1) return runPrimary(config)
  }
  return serve(config, worker)
}

/** One proxying process: on its own, or as a cluster worker (whose admin listener is the primary's). */
async function serve(config: Config, worker: boolean): Promise<void> {
  const app = await buildApp(config, worker ? workerAppOptions(config) : {})
  const { admin, logger } = app.tokentap
  await listenAs(
    'proxy',
    () => app.listen({ host: config.server.host, port: config.server.port }),
    config.server.host,
    config.server.port,
  )
  if (worker) serveWorker(app)
  else {
    await listenAs(
      'admin',
      () => admin.listen({ host: config.admin.host, port: config.admin.port }),
      config.admin.host,
      config.admin.port,
    )
    announceListening(logger, config, app.server.address() as AddressInfo, admin.server.address() as AddressInfo)
  }

  drainOnSignals(logger, async (signal) => {
    app.tokentap.draining = true
    logger.info({ signal, in_flight: app.tokentap.active.size, drain_seconds: config.server.drain_seconds }, 'draining')
    const deadline = setTimeout(() => {
      logger.warn({ in_flight: app.tokentap.active.size }, 'drain deadline reached: ending open streams')
      // Streams cut here are errors (the client did not go away), recorded as each connection closes.
      for (const ex of app.tokentap.active) ex.fail('TOKENTAP_ERR_SHUTTING_DOWN')
      app.server.closeAllConnections()
      // A hung upstream close must not hold the exit past the deadline (which includes the admin linger).
      setTimeout(
        () => {
          logger.error('shutdown did not complete after the drain deadline: exiting')
          process.exit(1)
        },
        5_000 + config.server.drain_linger_seconds * 1000,
      ).unref()
    }, config.server.drain_seconds * 1000)
    deadline.unref()
    // close() ends only connections idle now; one whose stream ends later would keep-alive and hold close() to the deadline.
    const idle = setInterval(() => app.server.closeIdleConnections(), 50)
    idle.unref()
    // In-flight requests run on; /readyz (admin) stays up and says 503.
    await app.close()
    clearInterval(idle)
    clearTimeout(deadline)
  })
}

void main().catch((err: unknown) => {
  // tokentap's own errors (a port in use, ...) say what to change in one line; anything else is a bug: its stack.
  process.stderr.write(
    `tokentap: ${err instanceof TokentapError ? err.message : ((err as Error).stack ?? String(err))}\n`,
  )
  process.exit(1)
})
