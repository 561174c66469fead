import type { Observations } from '../../timing/observations.ts'
import { fromObservations } from './finished-request.ts'
import type { FinishedRequest } from './finished-request.ts'
import { LiveStats } from './live-stats.ts'
import { RecentRequests } from './recent-requests.ts'

/**
 * Where finished requests go for the admin listener's live views: the live page's sliding
 * figures and the `/debug/requests/{id}` ring. One per process that proxies.
 */
export class LiveStore {
  readonly stats: LiveStats
  readonly recent: RecentRequests
  /** `metrics.stall_seconds`: a gap longer than this is a stall on the page too. */
  readonly stallSeconds: number

  constructor(options: { readonly recentRequests: number; readonly stallSeconds: number; readonly maxSeries?: number }) {
    this.stats = new LiveStats(options.maxSeries)
    this.recent = new RecentRequests(options.recentRequests)
    this.stallSeconds = options.stallSeconds
  }

  add(r: FinishedRequest): void {
    this.recent.add(r)
    this.stats.add(r)
  }

  /** For `Recorder#listen`: every finished request, from its Observations. */
  readonly listener = (o: Observations): void => {
    this.add(fromObservations(o))
  }
}
