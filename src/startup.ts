import type { AddressInfo } from 'node:net'
import type { Logger } from 'pino'
import type { Config } from './config/schema.ts'
import { TokentapError } from './errors.ts'
import { closeLogger } from './logger.ts'
import { routeLabel } from './proxy/open-exchange.ts'

/**
 * Start and stop, shared by one process (server.ts) and the cluster primary: the start-up lines,
 * a bind failure as one actionable line rather than a stack, and which signals drain.
 */

/** The two listeners, with the config key, flag and variable that set each one's port. */
const LISTENERS = {
  proxy: { name: 'proxy listener', host: 'server.host', port: 'server.port', flag: '--port', env: 'TOKENTAP_PORT' },
  admin: {
    name: 'admin listener (metrics, live page)',
    host: 'admin.host',
    port: 'admin.port',
    flag: '--admin-port',
    env: 'TOKENTAP_ADMIN_PORT',
  },
} as const

export type ListenerName = keyof typeof LISTENERS

/** host:port as a URL authority; a wildcard address is shown as localhost (what a browser on this machine opens). */
function authority(a: AddressInfo): string {
  if (a.address === '0.0.0.0' || a.address === '::') return `localhost:${a.port}`
  return a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`
}

interface ServiceUrls {
  readonly proxy: string
  readonly metrics: string
  readonly live: string
}

/** The URLs of the bound listeners (port 0 in the config is the port the system chose). */
function serviceUrls(config: Config, proxy: AddressInfo, admin: AddressInfo): ServiceUrls {
  const proxyBase = `${config.server.tls === undefined ? 'http' : 'https'}://${authority(proxy)}`
  const adminBase = `${config.admin.tls === undefined ? 'http' : 'https'}://${authority(admin)}`
  return { proxy: `${proxyBase}/`, metrics: `${adminBase}/metrics`, live: `${adminBase}/` }
}

/** The start-up line for people (the JSON log line beside it carries the same URLs for machines). */
function startupLine(urls: ServiceUrls): string {
  return `tokentap: proxy ${urls.proxy} · metrics ${urls.metrics} · live page ${urls.live}\n`
}

/** Writes the start-up line to stderr. A closed or broken stderr never takes the service down: the line is a courtesy. */
function announce(urls: ServiceUrls): void {
  if (process.stderr.listenerCount('error') === 0) process.stderr.on('error', () => undefined)
  process.stderr.write(startupLine(urls))
}

/** A bound address as host:port (IPv6 in brackets). */
function bound(a: AddressInfo): string {
  return `${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`
}

/** The service listens: the JSON 'tokentap listening' line, then the human line on stderr so stdout's JSON stays parseable. */
export function announceListening(
  logger: Logger,
  config: Config,
  proxy: AddressInfo,
  admin: AddressInfo,
  extra: Record<string, unknown> = {},
): void {
  const urls = serviceUrls(config, proxy, admin)
  logger.info(
    {
      proxy: bound(proxy),
      admin: bound(admin),
      ...extra,
      routes: config.routes.map(routeLabel),
      metrics: urls.metrics,
      live: urls.live,
    },
    'tokentap listening',
  )
  announce(urls)
}

/** SIGHUP and SIGUSR2 (nodemon) would otherwise end the process with every stream cut and no log line. */
const DRAIN_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR2'] as const

/**
 * On the first drain signal: `drain(signal)`, the 'stopped' line, a bounded wait for the log
 * (a stuck log reader never holds the exit), exit 0; a later signal changes nothing.
 */
export function drainOnSignals(logger: Logger, drain: (signal: string) => Promise<void>): void {
  let stopping = false
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return
    stopping = true
    await drain(signal)
    logger.info('stopped')
    await closeLogger(logger, 1000)
    process.exit(0)
  }
  for (const signal of DRAIN_SIGNALS) process.once(signal, () => void stop(signal))
}

const REASONS: Record<string, string> = {
  EADDRINUSE: 'the address is already in use (another process listens there)',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'the host is not an address of this machine',
}

/** A listen failure as one line naming the listener, its address and what changes it; other errors as they are. */
export function listenError(err: unknown, which: ListenerName, host: string, port: number): unknown {
  const code = (err as { code?: string } | undefined)?.code
  const reason = code === undefined ? undefined : REASONS[code]
  if (reason === undefined) return err
  const l = LISTENERS[which]
  const where = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
  const change =
    code === 'EADDRNOTAVAIL'
      ? `set '${l.host}' in the config`
      : `set '${l.port}' in the config, ${l.flag} N or ${l.env}`
  return new TokentapError('TOKENTAP_ERR_LISTEN', l.name, where, reason, change)
}

/** Listens, turning a bind failure into listenError's one line. */
export async function listenAs(
  which: ListenerName,
  listen: () => Promise<unknown>,
  host: string,
  port: number,
): Promise<void> {
  try {
    await listen()
  } catch (err) {
    throw listenError(err, which, host, port)
  }
}
