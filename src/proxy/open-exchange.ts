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
import type { TraceIdSource, TraceStart } from './trace-context.ts'

/**
 * The one way a request becomes an Exchange, for tokentap's own routes (plugin.ts) and the
 * @fastify/http-proxy helper (http-proxy.ts) alike: the route's label and prefix, t_req from the
 * injected clock, the request id, the path after the prefix, and the finish through the
 * FinishQueue once the response closes.
 */

/** What a proxy route is configured with (a config route, or the helper's options). */
export interface ProxyRouteOptions {
  readonly prefix: string
  /** The `route` label; the prefix when absent. */
  readonly name?: string
  readonly provider?: string
  readonly slo?: RouteSlo
  readonly echo_request_id?: boolean
  readonly server_timing?: boolean
}

/** A route's `route` label: its name, else its prefix. */
export const routeLabel = (route: { readonly prefix: string; readonly name?: string }): string => route.name ?? route.prefix

/** A proxy route as requests meet it: its runtime (label, in-flight count) and its prefix base. */
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

/** An opened exchange and where its request goes upstream. */
export interface Opened {
  readonly ex: Exchange
  readonly target: UpstreamTarget
}

/** The part of a response (HTTP/1 or HTTP/2) whose close finishes an exchange. */
interface ClosingResponse {
  readonly writableFinished: boolean
  readonly writableEnded: boolean
  readonly socket: { readonly writableLength: number } | null
  once(event: 'close' | 'prefinish' | 'finish', listener: () => void): unknown
}

export class ExchangeOpener {
  readonly #deps: ExchangeDeps
  readonly #ids: RequestIds
  readonly #finishing: FinishQueue
  readonly #tenants: TenantResolver | undefined
  readonly #traces: TraceIdSource | undefined
  /** The monotonic clock (ms) every time of an exchange comes from. */
  readonly now: () => number

  constructor(deps: ExchangeDeps, ids: RequestIds, finishing: FinishQueue, now: () => number, tenants?: TenantResolver, traces?: TraceIdSource) {
    this.#deps = deps
    this.#traces = traces
    this.#ids = ids
    this.#finishing = finishing
    this.now = now
    this.#tenants = tenants
  }

  /** Whether a raw request target belongs under a route's prefix. */
  owns(route: ProxyRoute, url: string): boolean {
    const base = route.base
    return base === '' || url === base || url.startsWith(`${base}/`) || url.startsWith(`${base}?`)
  }

  /**
   * The request's error when it must not go upstream at all (400): two Host fields (RFC 9112
   * §3.2), or a path after the prefix whose dot-segments, in any spelling, climb above the
   * route's base path. Undefined when it may go.
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

  /**
   * Where a request under `route` goes upstream, its id, its tenant and its span's ids (an
   * exchange's or a realtime session's): the one place a request's tenant is resolved, once.
   */
  identify(
    route: ProxyRoute,
    req: IncomingMessage,
    url: string,
  ): { readonly target: UpstreamTarget; readonly id: string; readonly generated: boolean; readonly tenant: string | undefined; readonly trace: TraceStart | undefined } {
    // Fastify matched the decoded path: the rest goes upstream as the client wrote it.
    const target = upstreamPathAndQuery(url, rawPrefixEnd(url, route.base))
    const { id, generated } = this.#ids.of(req.headers)
    const tenant = this.#tenants?.resolve(req.headers, target.pathAndQuery)
    // The span's ids exist from the start, so `propagate` can name the span upstream (trace-context.ts).
    const trace = this.#traces?.start(req.headers)
    return { target, id, generated, tenant, trace }
  }

  /** The exchange of a request whose headers arrived at `tReq`; `url` is its origin-form target. */
  open(route: ProxyRoute, req: IncomingMessage, url: string, tReq: number): Opened {
    const { target, id, generated, tenant, trace } = this.identify(route, req, url)
    const ex = new Exchange(this.#deps, route.runtime, id, req.method ?? 'GET', target.path, tReq, generated, tenant)
    ex.trace = trace
    return { ex, target }
  }

  /**
   * Finishes `ex` through the queue (off the socket callback). t_end is when the answer's last
   * byte was written (`lastByteAt`, last-byte.ts); a cancelled or failed request ends now.
   */
  finish(ex: Exchange, clientGone: boolean, lastByteAt?: number): void {
    const tEnd = clientGone || ex.failure !== undefined || lastByteAt === undefined ? this.now() : lastByteAt
    this.#finishing.add(ex, tEnd, clientGone)
  }

  /** Finishes `ex` when `res` closes: `clientGone` when its last byte was not written. */
  finishOnClose(ex: Exchange, res: ClosingResponse): void {
    const last = new LastByte(res, this.now)
    res.once('close', () => this.finish(ex, !res.writableFinished, last.at))
  }
}
