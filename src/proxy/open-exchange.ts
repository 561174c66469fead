import type { IncomingMessage } from 'node:http'
import type { RouteSlo } from '../timing/slo.ts'
import { prefixBase } from '../config/load-config.ts'
import { TokentapError } from '../errors.ts'
import { Exchange } from './exchange.ts'
import type { ExchangeDeps, RouteRuntime } from './exchange.ts'
import type { FinishQueue } from './finish-queue.ts'
import { LastByte } from './last-byte.ts'
import type { TenantResolver } from '../record/tenant.ts'
import type { RequestIds } from './request-id.ts'
import { escapesRoot, rawPrefixEnd, upstreamPathAndQuery } from './route-path.ts'
import type { UpstreamTarget } from './route-path.ts'
import type { TraceIdSource, TraceStart } from '../record/trace-context.ts'

/** The one way a request becomes an Exchange, for tokentap's routes and the @fastify/http-proxy helper alike. */

export interface ProxyRouteOptions {
  readonly prefix: string
  /** The `route` label; the prefix when absent. */
  readonly name?: string
  readonly provider?: string
  readonly slo?: RouteSlo
  readonly echo_request_id?: boolean
  readonly server_timing?: boolean
}

export const routeLabel = (route: { readonly prefix: string; readonly name?: string }): string =>
  route.name ?? route.prefix

export interface ProxyRoute {
  readonly runtime: RouteRuntime
  readonly base: string
}

export function proxyRoute(options: ProxyRouteOptions): ProxyRoute {
  return {
    runtime: {
      label: routeLabel(options),
      prefix: options.prefix,
      provider: options.provider ?? 'auto',
      slo: options.slo,
      inFlight: 0,
      echoRequestId: options.echo_request_id,
      serverTiming: options.server_timing,
    },
    base: prefixBase(options.prefix),
  }
}

export interface Opened {
  readonly ex: Exchange
  readonly target: UpstreamTarget
}

/** The part of a response (HTTP/1 or HTTP/2) whose close finishes an exchange. */
interface ClosingResponse {
  readonly writableFinished: boolean
  readonly writableEnded: boolean
  readonly socket: { readonly writableLength: number } | null
  once(event: 'close', listener: () => void): unknown
  on(event: 'prefinish' | 'finish', listener: () => void): unknown
}

export class ExchangeOpener {
  readonly #deps: ExchangeDeps
  readonly #ids: RequestIds
  readonly #finishing: FinishQueue
  readonly #tenants: TenantResolver | undefined
  readonly #traces: TraceIdSource | undefined
  readonly now: () => number

  constructor(
    deps: ExchangeDeps,
    ids: RequestIds,
    finishing: FinishQueue,
    now: () => number,
    tenants?: TenantResolver,
    traces?: TraceIdSource,
  ) {
    this.#deps = deps
    this.#traces = traces
    this.#ids = ids
    this.#finishing = finishing
    this.now = now
    this.#tenants = tenants
  }

  owns(route: ProxyRoute, url: string): boolean {
    const base = route.base
    return base === '' || url === base || url.startsWith(`${base}/`) || url.startsWith(`${base}?`)
  }

  /**
   * A 400 for two Host fields (RFC 9112 §3.2) or dot-segments, in any spelling, that climb above
   * the route's base path; undefined when the request may go upstream.
   */
  confine(route: ProxyRoute, req: IncomingMessage, url: string): TokentapError | undefined {
    let hosts = 0
    const raw = req.rawHeaders
    for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 4 && raw[i].toLowerCase() === 'host') hosts++
    if (hosts > 1) return new TokentapError('TOKENTAP_ERR_BAD_REQUEST', 'more than one Host header field')
    if (escapesRoot(upstreamPathAndQuery(url, rawPrefixEnd(url, route.base)).path)) {
      return new TokentapError('TOKENTAP_ERR_BAD_TARGET', "its dot-segments leave the route's base path")
    }
    return undefined
  }

  /** The one place a request's tenant is resolved, once. */
  identify(
    route: ProxyRoute,
    req: IncomingMessage,
    url: string,
  ): {
    readonly target: UpstreamTarget
    readonly id: string
    readonly generated: boolean
    readonly tenant: string | undefined
    readonly trace: TraceStart | undefined
  } {
    // Fastify matched the decoded path: the rest goes upstream as the client wrote it.
    const target = upstreamPathAndQuery(url, rawPrefixEnd(url, route.base))
    const { id, generated } = this.#ids.of(req.headers)
    const tenant = this.#tenants?.resolve(req.headers, target.pathAndQuery)
    // The span's ids exist from the start, so `propagate` can name the span upstream (trace-context.ts).
    const trace = this.#traces?.start(req.headers)
    return { target, id, generated, tenant, trace }
  }

  open(route: ProxyRoute, req: IncomingMessage, url: string, tReq: number): Opened {
    const { target, id, generated, tenant, trace } = this.identify(route, req, url)
    const ex = new Exchange(this.#deps, route.runtime, id, req.method ?? 'GET', target.path, tReq, generated, tenant)
    ex.trace = trace
    return { ex, target }
  }

  /** Finishes off the socket callback; t_end is when the last byte was written (last-byte.ts). */
  finish(ex: Exchange, clientGone: boolean, lastByteAt?: number): void {
    const tEnd = clientGone || ex.failure !== undefined || lastByteAt === undefined ? this.now() : lastByteAt
    this.#finishing.add(ex, tEnd, clientGone)
  }

  finishOnClose(ex: Exchange, res: ClosingResponse): void {
    // The helper's reply ends the response itself: listen from the start.
    const last = new LastByte(res, this.now)
    last.watch()
    res.once('close', () => this.finish(ex, !res.writableFinished, last.at))
  }
}
