import { Agent } from 'undici'
import type { Config } from '../config/schema.ts'

/** Where a route forwards to, and the pooled connections that take it there. */

export interface Upstream {
  /** `https://host:port` */
  readonly origin: string
  /** Path prefix on the upstream (`/api` for `https://host/api`), '' for none. */
  readonly basePath: string
}

export function parseUpstream(url: string): Upstream {
  const u = new URL(url)
  return { origin: u.origin, basePath: u.pathname.replace(/\/+$/, '') }
}

/**
 * The pooled connections to every upstream. Keep-alive, no pipelining, and no automatic
 * retries (undici retries nothing unless asked, so a POST is never sent twice). Body timeout
 * is the idle gap between two reads, never a cap on a long healthy stream.
 */
export function createAgent(upstream: Config['upstream']): Agent {
  return new Agent({
    connect: { timeout: upstream.connect_timeout_ms },
    headersTimeout: upstream.headers_timeout_ms,
    bodyTimeout: upstream.idle_timeout_ms,
    keepAliveTimeout: upstream.keep_alive_timeout_ms,
    pipelining: 1,
  })
}
