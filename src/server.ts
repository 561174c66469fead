import type { AddressInfo } from 'node:net'
import { buildApp } from './app.ts'
import { outcomeOf, parseCli } from './cli.ts'
import { isClusterWorker, runPrimary, serveWorker, workerConfig } from './cluster/cluster.ts'
import type { Config } from './config/schema.ts'
import { TokentapError } from './errors.ts'
import { closeLogger, createLogger } from './logger.ts'
import { routeLabel } from './proxy/open-exchange.ts'
import { announce, listenAs, serviceUrls } from './startup.ts'

/**
 * The process (`npm start`; src/bin.ts, the package's bin, imports this file): the command line
 * (src/cli.ts: `--config FILE`, else TOKENTAP_CONFIG, else config/default.yaml; or a one-route
 * `--upstream URL`) gives the config; build the app, listen on the proxy and admin ports, and drain on SIGTERM/SIGINT/SIGHUP/SIGUSR2:
 * /readyz turns 503, the listener stops accepting, in-flight streams get up to
 * `server.drain_seconds` to finish; then, if /metrics has been scraped, it answers for
 * `server.drain_linger_seconds` more (the drain's last figures reach the next scrape) and the process exits.
 * With `server.workers` > 1 this process is the cluster primary (src/cluster/cluster.ts): it serves the
 * admin listener and forks the workers, each of which runs the proxy listener as below.
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
  // A worker's lines carry its pid (pino's own field name): which worker logged is otherwise lost.
  const app = await buildApp(config, worker ? { logger: createLogger(config, 1, { pid: process.pid }) } : {})
  const { admin, logger } = app.tokentap
  await listenAs('proxy', () => app.listen({ host: config.server.host, port: config.server.port }), config.server.host, config.server.port)
  // A worker's admin listener is the primary's; it sends its metrics over IPC instead.
  if (worker) serveWorker(app)
  else await listenAs('admin', () => admin.listen({ host: config.admin.host, port: config.admin.port }), config.admin.host, config.admin.port)
  // The bound addresses (port 0 in the config means any free port: tests and side-by-side runs).
  const bound = (s: typeof app.server): string => {
    const a = s.address() as AddressInfo
    return `${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`
  }
  if (!worker) {
    const urls = serviceUrls(config, app.server.address() as AddressInfo, admin.server.address() as AddressInfo)
    logger.info({ proxy: bound(app.server), admin: bound(admin.server), routes: config.routes.map(routeLabel), metrics: urls.metrics, live: urls.live }, 'tokentap listening')
    // The line for people, on stderr: the JSON log on stdout stays parseable.
    announce(urls)
  }

  let stopping = false
  const drain = async (signal: string): Promise<void> => {
    if (stopping) return
    stopping = true
    app.tokentap.draining = true
    logger.info({ signal, in_flight: app.tokentap.active.size, drain_seconds: config.server.drain_seconds }, 'draining')
    const deadline = setTimeout(() => {
      logger.warn({ in_flight: app.tokentap.active.size }, 'drain deadline reached: ending open streams')
      // Streams cut here are errors (the client did not go away), recorded as each connection closes.
      for (const ex of app.tokentap.active) ex.fail('TOKENTAP_ERR_SHUTTING_DOWN')
      app.server.closeAllConnections()
      // Should anything still hold the close (a hung upstream close), do not hang forever; the
      // close includes the admin listener's linger (server.drain_linger_seconds).
      setTimeout(
        () => {
          logger.error('shutdown did not complete after the drain deadline: exiting')
          process.exit(1)
        },
        5_000 + config.server.drain_linger_seconds * 1000,
      ).unref()
    }, config.server.drain_seconds * 1000)
    deadline.unref()
    // close() ends the connections idle at that moment; one whose stream ends later stays open
    // for keep-alive (Fastify's keepAliveTimeout: 72 s) and would hold close() to the deadline.
    const idle = setInterval(() => app.server.closeIdleConnections(), 50)
    idle.unref()
    // Stops accepting at once; in-flight requests run on; /readyz (admin) stays up and says 503.
    await app.close()
    clearInterval(idle)
    clearTimeout(deadline)
    logger.info('stopped')
    // The last lines get a bounded wait: a log reader that is gone or stuck never holds the exit.
    await closeLogger(logger, 1000)
    process.exit(0)
  }
  // SIGHUP (the terminal went away) and SIGUSR2 (nodemon's restart) would otherwise end the
  // process at once, every stream cut with no log line: they drain like SIGTERM.
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR2'] as const) process.once(signal, () => void drain(signal))
}

void main().catch((err: unknown) => {
  // tokentap's own errors (a port in use, ...) say what to change in one line; anything else is a bug: its stack.
  process.stderr.write(`tokentap: ${err instanceof TokentapError ? err.message : ((err as Error).stack ?? String(err))}\n`)
  process.exit(1)
})
