/** Where a route forwards to (the connections that take it there: upstream-dispatcher.ts). */

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
