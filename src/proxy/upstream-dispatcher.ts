import { readFileSync } from 'node:fs'
import { Agent, EnvHttpProxyAgent, ProxyAgent } from 'undici'
import type { Dispatcher } from 'undici'
import type { Config, RouteConfig, UpstreamTls } from '../config/schema.ts'
import { TokentapError } from '../errors.ts'
import { tunnelPoolFactory, upstreamConnector, upstreamPool } from './upstream-connector.ts'

/**
 * One shared undici pool, plus one per route with its own `tls:` or `proxy:`. Through a forward
 * proxy (`proxy:` or HTTPS_PROXY/HTTP_PROXY/NO_PROXY) every upstream is reached by a CONNECT
 * tunnel, so bytes and timing stay those of a direct connection.
 */

type AgentOptions = Agent.Options

/**
 * No pipelining and no retries (a POST is never sent twice). undici's body timeout is off: the
 * proxy's own timer (deadlines.ts) fires on time where undici's could be ~1 s late, and would only
 * cost a refresh per chunk.
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

function createAgent(upstream: Config['upstream']): Agent {
  return new Agent(agentOptions(upstream))
}

/** Read once at start-up; a file that cannot be read stops start-up naming its key. */
export function readUpstreamTls(
  tls: UpstreamTls,
  key: string,
): { ca?: Buffer; cert?: Buffer; key?: Buffer; servername?: string } {
  const read = (name: 'ca' | 'cert' | 'key'): Buffer | undefined => {
    const file = tls[name]
    if (file === undefined) return undefined
    try {
      return readFileSync(file)
    } catch (err) {
      throw new TokentapError(
        'TOKENTAP_ERR_CONFIG_INVALID',
        `'${key}.${name}' cannot be read: ${(err as Error).message}`,
      )
    }
  }
  // `ca` replaces Node's trusted roots in tls.connect: a route with its own CA trusts no other.
  return { ca: read('ca'), cert: read('cert'), key: read('key'), servername: tls.servername }
}

/**
 * The environment's forward proxies (`''`: none), read as undici's EnvHttpProxyAgent does
 * (lower-case names first; https falls back to HTTP_PROXY), but once, so what applies is what was
 * set at start.
 */
export function proxyEnv(env: NodeJS.ProcessEnv): { httpProxy: string; httpsProxy: string; noProxy: string } {
  return {
    httpProxy: env.http_proxy ?? env.HTTP_PROXY ?? '',
    httpsProxy: env.https_proxy ?? env.HTTPS_PROXY ?? '',
    noProxy: env.no_proxy ?? env.NO_PROXY ?? '',
  }
}

/**
 * undici's ProxyAgent would keep only the last of repeated headers and refuses Proxy-Authorization,
 * which was for a proxy in front of tokentap anyway; repeats become one name with every value.
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
    const dispatcher = this.#create(
      route.tls === undefined ? undefined : readUpstreamTls(route.tls, `routes[${index}].tls`),
      route.proxy,
    )
    this.#own.push(dispatcher)
    return dispatcher
  }

  async close(): Promise<void> {
    await Promise.all([this.shared, ...this.#own].map((d) => d.close()))
  }

  #create(tls: ReturnType<typeof readUpstreamTls> | undefined, proxy: string | undefined): Dispatcher {
    const options = agentOptions(this.#upstream)
    const timeout = this.#upstream.connect_timeout_ms
    // undici's ProxyAgent opens the proxy connection and the tunnelled TLS with these, not `connect`.
    const tunnel = { proxyTls: { timeout }, requestTls: { timeout, ...tls }, factory: tunnelPoolFactory(timeout) }
    if (proxy !== undefined) return new ProxyAgent({ ...options, ...tunnel, uri: proxy }).compose(keepRepeatedHeaders)
    const direct: AgentOptions = { ...options, connect: upstreamConnector({ timeout, ...tls }) }
    const env = this.#env
    if (env.httpProxy === '' && env.httpsProxy === '') return new Agent(direct)
    return new EnvHttpProxyAgent({ ...direct, ...tunnel, ...env }).compose(keepRepeatedHeaders)
  }
}
