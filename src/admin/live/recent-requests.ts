import type { FinishedRequest } from './finished-request.ts'

/**
 * The last N finished requests by id, for `GET /debug/requests/{id}`: a ring buffer of their
 * figures plus a Map from id to slot, so memory is bounded by N (≈ 0.5 KB a request with its
 * id) and a lookup is one Map get. A reused id finds its latest request.
 */

/** A finished request as the store keeps it: its figures without the per-gap arrays. */
export type RecentRequest = Omit<FinishedRequest, 'gapSeconds' | 'gapTokens'>

/**
 * `r` without its per-gap arrays. Spelled out, not `{ gapSeconds, gapTokens, ...kept }`: an object
 * rest copy of some twenty keys was the most expensive step of a short request's end. `satisfies`
 * keeps the list complete when FinishedRequest grows.
 */
function withoutGaps(r: FinishedRequest): RecentRequest {
  return {
    id: r.id,
    route: r.route,
    provider: r.provider,
    model: r.model,
    outcome: r.outcome,
    statusCode: r.statusCode,
    ttft: r.ttft,
    ttfot: r.ttfot,
    headers: r.headers,
    e2e: r.e2e,
    tpot: r.tpot,
    tps: r.tps,
    itlP50: r.itlP50,
    itlP99: r.itlP99,
    maxGap: r.maxGap,
    stalls: r.stalls,
    outputTokens: r.outputTokens,
    outputSource: r.outputSource,
    inputTokens: r.inputTokens,
    chunks: r.chunks,
    concurrency: r.concurrency,
    endedAt: r.endedAt,
  } satisfies { readonly [K in keyof Required<RecentRequest>]: RecentRequest[K] }
}

export class RecentRequests {
  readonly capacity: number
  readonly #ring: (RecentRequest | undefined)[]
  readonly #byId = new Map<string, RecentRequest>()
  #next = 0

  constructor(capacity: number) {
    this.capacity = capacity
    this.#ring = new Array<RecentRequest | undefined>(capacity)
  }

  get size(): number {
    return this.#byId.size
  }

  add(r: FinishedRequest): void {
    if (this.capacity === 0) return
    const kept = withoutGaps(r)
    const old = this.#ring[this.#next]
    // The id may have been reused by a later request: only its own entry goes.
    if (old !== undefined && this.#byId.get(old.id) === old) this.#byId.delete(old.id)
    this.#ring[this.#next] = kept
    this.#byId.delete(kept.id)
    this.#byId.set(kept.id, kept)
    this.#next = (this.#next + 1) % this.capacity
  }

  get(id: string): RecentRequest | undefined {
    return this.#byId.get(id)
  }
}

const ms = (seconds: number | undefined): number | null => (seconds === undefined ? null : Math.round(seconds * 1e6) / 1e3)

/**
 * The JSON of `/debug/requests/{id}`: the same names and rounding as the request's log line
 * (milliseconds to the µs), plus `stalls`, `ttfot_ms`, `concurrency` and when it ended.
 * `now`: the monotonic clock now, to date `endedAt`.
 */
export function requestView(r: RecentRequest, now: number, wallNow: number): Record<string, unknown> {
  return {
    request_id: r.id,
    route: r.route,
    provider: r.provider,
    model: r.model,
    status: r.statusCode,
    outcome: r.outcome,
    headers_ms: ms(r.headers),
    ttft_ms: ms(r.ttft),
    ttfot_ms: ms(r.ttfot),
    e2e_ms: ms(r.e2e),
    tpot_ms: ms(r.tpot),
    itl_p50_ms: ms(r.itlP50),
    itl_p99_ms: ms(r.itlP99),
    max_gap_ms: ms(r.maxGap),
    stalls: r.stalls,
    output_tokens: r.outputTokens,
    output_source: r.outputSource,
    input_tokens: r.inputTokens ?? null,
    chunks: r.chunks,
    tps: r.tps === undefined ? null : Math.round(r.tps * 100) / 100,
    concurrency: r.concurrency,
    ended_at: new Date(wallNow - (now - r.endedAt)).toISOString(),
  }
}
