/** Where a route forwards to (its connections: upstream-dispatcher.ts). */

export interface Upstream {
  readonly origin: string
  /** Path prefix on the upstream (`/api` for `https://host/api`), '' for none. */
  readonly basePath: string
}

export function parseUpstream(url: string): Upstream {
  const u = new URL(url)
  return { origin: u.origin, basePath: u.pathname.replace(/\/+$/, '') }
}
