import type { Observations } from '../../record/observations.ts'
import { fromObservations } from './finished-request.ts'
import type { FinishedRequest } from './finished-request.ts'
import { LiveStats } from './live-stats.ts'
import { RecentRequests } from './recent-requests.ts'
import { RealtimeLive } from './realtime-live.ts'
import type { OpenSession } from './realtime-live.ts'

/** Where finished requests go for the live views: the sliding figures and the `/debug/requests/{id}` ring. */
export class LiveStore {
  readonly stats: LiveStats
  readonly recent: RecentRequests
  /** `metrics.stall_seconds`: a gap longer than this is a stall on the page too. */
  readonly stallSeconds: number
  /** Realtime (WebSocket) sessions: open, finished, and their responses. */
  readonly realtime: RealtimeLive

  constructor(options: {
    readonly recentRequests: number
    readonly stallSeconds: number
    readonly maxSeries?: number
    readonly realtimeOpen?: Iterable<OpenSession>
    /** When the process began collecting (its clock): a window's rates divide by the time it covers since. */
    readonly startedAt?: number
  }) {
    this.stats = new LiveStats(options.maxSeries, options.startedAt)
    this.recent = new RecentRequests(options.recentRequests)
    this.stallSeconds = options.stallSeconds
    // A session keeps up to 50 responses: fewer of them are kept than requests.
    this.realtime = new RealtimeLive(Math.min(options.recentRequests, 1000), options.realtimeOpen ?? [])
  }

  readonly #onAdd: ((r: FinishedRequest) => void)[] = []

  add(r: FinishedRequest): void {
    this.recent.add(r)
    this.stats.add(r)
    for (const f of this.#onAdd) f(r)
  }

  /** Hands every request added on to `f` too (a cluster worker sends them to the primary). */
  onAdd(f: (r: FinishedRequest) => void): void {
    this.#onAdd.push(f)
  }

  /** For `Recorder#listen`: every finished request, from its Observations. */
  readonly listener = (o: Observations): void => {
    this.add(fromObservations(o))
  }
}
