import type { Logger } from 'pino'
import type { Config } from '../config/schema.ts'
import type { MetricsSource } from '../metrics/prometheus/source.ts'
import type { Exchange } from '../proxy/exchange.ts'
import { snapshotStreams } from './debug-streams.ts'
import type { StreamsSnapshot } from './debug-streams.ts'
import type { InFlight } from './live/live-message.ts'
import type { LiveStore } from './live/live-store.ts'
import { requestView } from './live/recent-requests.ts'

/**
 * What the admin listener serves, from one proxying process (`localAdminSource`) or the cluster
 * primary (cluster/admin-source.ts); the routes never branch on which, as with MetricsSource.
 */
export interface AdminSource {
  readonly config: Config
  readonly logger: Logger
  readonly metrics: MetricsSource
  /** `/readyz` answers 503 while true (draining, or a cluster still starting). */
  readonly draining: boolean
  /** The live page and `/debug/requests/{id}`; where absent they answer 501. */
  readonly live?: LiveSource
  /** `/debug/streams`: the requests in flight, oldest first; where absent it answers 501. */
  readonly streams?: () => StreamsSnapshot | Promise<StreamsSnapshot>
}

/** What the live page and `/debug/requests/{id}` read. */
export interface LiveSource {
  /** The live figures (in the cluster primary, fed by its workers). */
  readonly store: LiveStore
  /** The streams in flight the live page draws (in the cluster primary, a mirror of the workers' oldest). */
  readonly active: ReadonlySet<InFlight>
  /** Requests in flight, all of them (more than `active` holds in a cluster). */
  inFlight(): number
  /** The monotonic clock (ms) the requests' times come from. */
  readonly now: () => number
  /** A live page opened (true) or the last one closed (false): the cluster mirrors its workers' streams only meanwhile. */
  watch(watching: boolean): void
  /** A finished request's or realtime session's view; null when none is kept. */
  lookup(id: string): Promise<Record<string, unknown> | null>
  /** Which finished requests a lookup searches, for its 404 ("the last 100"). */
  readonly searched: string
}

/** A finished request's view, or a realtime session's with its last responses; null when neither is kept. */
export function lookupRequest(live: LiveStore, id: string, now: number): Record<string, unknown> | null {
  const found = live.recent.get(id)
  if (found !== undefined) return requestView(found, now, Date.now()) as unknown as Record<string, unknown>
  return live.realtime.sessionView(id, now, Date.now()) ?? null
}

/** What one proxying process's admin listener reads of it; `draining` is read when asked. */
export interface LocalService {
  readonly config: Config
  readonly logger: Logger
  readonly registry: MetricsSource
  readonly active: ReadonlySet<Exchange>
  readonly now: () => number
  readonly draining: boolean
}

/** The admin source of one proxying process: its own registry, exchanges and LiveStore. */
export function localAdminSource(service: LocalService, store: LiveStore): AdminSource {
  const { active, now } = service
  return {
    config: service.config,
    logger: service.logger,
    metrics: service.registry,
    get draining() {
      return service.draining
    },
    live: {
      store,
      active,
      inFlight: () => active.size,
      now,
      watch: () => undefined,
      lookup: async (id) => lookupRequest(store, id, now()),
      searched: `the last ${store.recent.capacity}`,
    },
    streams: () => snapshotStreams(active, now()),
  }
}
