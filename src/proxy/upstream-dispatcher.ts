import { readFileSync } from 'node:fs'
import { Agent, EnvHttpProxyAgent, ProxyAgent } from 'undici'
import type { Dispatcher } from 'undici'
import type { Config, RouteConfig, UpstreamTls } from '../config/schema.ts'
import { TokentapError } from '../errors.ts'
import { tunnelPoolFactory, upstreamConnector, upstreamPool } from './upstream-connector.ts'

/**
 * The undici dispatchers that reach the upstreams: one shared pool for every route that needs
 * nothing of its own, and one per route that has its own `tls:` (CA bundle, client certificate
 * for mTLS, SNI name) or `proxy:`. A corporate forward proxy from the environment
 * (`HTTPS_PROXY` / `HTTP_PROXY`, `NO_PROXY`) applies to every route without a `proxy:` of its own. Through a proxy, every upstream (https or plain
 * http) is reached through a CONNECT tunnel, so the bytes and their timing are those of a direct
 * connection: the proxy relays a byte stream it cannot buffer into messages.
 */

type AgentOptions = Agent.Options

/**
 * Keep-alive, no pipelining, and no automatic retries (undici retries nothing unless asked, so a
 * POST is never sent twice). undici's body timeout is off: `idle_timeout_ms` runs on the
 * proxy's own timer (deadlines.ts), which covers the whole body from the head to the end
 * and fires within ms of its setting; undici's would fire up to ~1 s later than that, so as a
 * backstop it could never act, and it would only cost a timer refresh per HTTP chunk.
 * Connections are opened by upstreamConnector (the proxy's own connect timer, an unsolicited 100
 * skipped); through a forward proxy by undici's ProxyAgent, whose pools tunnelPoolFactory makes
 * with the same timer and skip.
 */
function agentOptions(upstream: Config['upstream']): AgentOptions {
  return {
    connect: upstreamConnector({ timeout: upstream.connect_timeout_ms }),
    headersTimeout: upstream.headers_timeout_ms,
    bodyTimeout: 0,
    keepAliveTimeout: upstream.keep_alive_timeout_ms,
    pipelining: 1,
    factory: upstreamPool,
  }
}

/** The pooled connections to every upstream that needs no TLS or proxy settings of its own. */
function createAgent(upstream: Config['upstream']): Agent {
  return new Agent(agentOptions(upstream))
}

/** The PEM files of a route's `tls:`, read once at start-up; a file that cannot be read stops start-up naming its key. */
export function readUpstreamTls(tls: UpstreamTls, key: string): { ca?: Buffer; cert?: Buffer; key?: Buffer; servername?: string } {
  const read = (name: 'ca' | 'cert' | 'key'): Buffer | undefined => {
    const file = tls[name]
    if (file === undefined) return undefined
    try {
      return readFileSync(file)
    } catch (err) {
      throw new TokentapError('TOKENTAP_ERR_CONFIG_INVALID', `'${key}.${name}' cannot be read: ${(err as Error).message}`)
    }
  }
  // undici hands these to tls.connect, where `ca` replaces Node's trusted roots: a route that
  // names its own CA (a self-hosted model server's) trusts that CA and no other.
  return { ca: read('ca'), cert: read('cert'), key: read('key'), servername: tls.servername }
}

/**
 * The forward proxies named by the environment (`''`: none), read as undici's EnvHttpProxyAgent
 * reads them (lower-case names first; https upstreams use HTTP_PROXY when HTTPS_PROXY is unset),
 * but once, from `env`, so that what applies is what was set when tokentap started.
 */
export function proxyEnv(env: NodeJS.ProcessEnv): { httpProxy: string; httpsProxy: string; noProxy: string } {
  return { httpProxy: env.http_proxy ?? env.HTTP_PROXY ?? '', httpsProxy: env.https_proxy ?? env.HTTPS_PROXY ?? '', noProxy: env.no_proxy ?? env.NO_PROXY ?? '' }
}

/**
 * undici's ProxyAgent turns a flat header list into an object, which would keep only the last
 * of repeated headers, and refuses a request that carries Proxy-Authorization. Repeated headers
 * become one name with every value (sent as that many lines, each value unchanged); the client's
 * Proxy-Authorization was for a proxy in front of tokentap, never for the upstream.
 */
function keepRepeatedHeaders(dispatch: Dispatcher['dispatch']): Dispatcher['dispatch'] {
  return (opts, handler) => {
    const raw = opts.headers
    if (!Array.isArray(raw)) return dispatch(opts, handler)
    const headers: Record<string, string | string[]> = {}
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i] as string
      const value = raw[i + 1] as string
      if (name.toLowerCase() === 'proxy-authorization') continue
      const seen = headers[name]
      headers[name] = seen === undefined ? value : Array.isArray(seen) ? [...seen, value] : [seen, value]
    }
    return dispatch({ ...opts, headers }, handler)
  }
}

/** The dispatcher of every route without `tls:` or `proxy:`, and one of its own for each route that has them. */
export class UpstreamDispatchers {
  readonly shared: Dispatcher
  readonly #upstream: Config['upstream']
  readonly #env: ReturnType<typeof proxyEnv>
  readonly #own: Dispatcher[] = []
  #direct: Dispatcher | undefined

  constructor(upstream: Config['upstream'], env: NodeJS.ProcessEnv = process.env) {
    this.#upstream = upstream
    this.#env = proxyEnv(env)
    this.shared = this.#create(undefined, undefined)
  }

  /** The dispatcher for `routes[index]`: the shared one unless the route has TLS or proxy settings. */
  forRoute(route: RouteConfig, index: number): Dispatcher {
    if (route.simulator !== undefined) {
      if (this.#env.httpProxy === '' && this.#env.httpsProxy === '') return this.shared
      // The simulator listens on loopback in this process: never through a corporate proxy.
      if (this.#direct === undefined) {
        this.#direct = createAgent(this.#upstream)
        this.#own.push(this.#direct)
      }
      return this.#direct
    }
    if (route.tls === undefined && route.proxy === undefined) return this.shared
    const dispatcher = this.#create(route.tls === undefined ? undefined : readUpstreamTls(route.tls, `routes[${index}].tls`), route.proxy)
    this.#own.push(dispatcher)
    return dispatcher
  }

  async close(): Promise<void> {
    await Promise.all([this.shared, ...this.#own].map((d) => d.close()))
  }

  #create(tls: ReturnType<typeof readUpstreamTls> | undefined, proxy: string | undefined): Dispatcher {
    const options = agentOptions(this.#upstream)
    const timeout = this.#upstream.connect_timeout_ms
    // The connection to the proxy and the TLS session through its tunnel are made by undici's
    // ProxyAgent with these, not with `connect`: each gets the connect timeout, the second the route's TLS.
    const tunnel = { proxyTls: { timeout }, requestTls: { timeout, ...tls }, factory: tunnelPoolFactory(timeout) }
    if (proxy !== undefined) return new ProxyAgent({ ...options, ...tunnel, uri: proxy }).compose(keepRepeatedHeaders)
    const direct: AgentOptions = { ...options, connect: upstreamConnector({ timeout, ...tls }) }
    const env = this.#env
    if (env.httpProxy === '' && env.httpsProxy === '') return new Agent(direct)
    return new EnvHttpProxyAgent({ ...direct, ...tunnel, ...env }).compose(keepRepeatedHeaders)
  }
}
