import type { Timing } from '../timing/request-timing.ts'

/** Per-route latency SLO and one request's verdict; definitions: ../../docs/metrics.md#latency-slos-and-goodput. */

export interface RouteSlo {
  /** A request meets the SLO only if its TTFT is at most this. */
  readonly ttft_seconds?: number
  /** …and its own token-weighted ITL P99 (the log line's itl_p99_ms) is at most this. */
  readonly itl_p99_seconds?: number
}

export const SloVerdict = { met: 'met', missed: 'missed' } as const
export type SloVerdict = (typeof SloVerdict)[keyof typeof SloVerdict]

export interface SloInput {
  readonly outcome: 'ok' | 'error' | 'cancelled'
  readonly statusCode: number
  readonly timing: Timing
  /** The request's ITL P99 (seconds), when it has one; only looked at with `itl_p99_seconds`. */
  readonly itlP99: number | undefined
}

/** A client error the caller caused (bad request, auth, not found) is not the service's miss; 408 and 429 are. */
function callerError(status: number): boolean {
  return status >= 400 && status < 500 && status !== 408 && status !== 429
}

/**
 * The verdict, or undefined when the request is not judged:
 * - ok with content: met when TTFT ≤ ttft_seconds and ITL P99 ≤ itl_p99_seconds (each bound only when set;
 *   a request with no ITL observations has nothing that can break the ITL bound);
 * - error (5xx, 408, 429, upstream failure, provider error event, reset mid-stream): missed;
 * - cancelled: missed when it had already broken a bound (TTFT, ITL P99, or waited past
 *   ttft_seconds with no content), else not judged: the caller chose to leave;
 * - ok without content (non-streamed answers, model lists) and 4xx caller errors: not judged.
 */
export function judgeSlo(slo: RouteSlo, r: SloInput): SloVerdict | undefined {
  const t = r.timing
  const ttftOver =
    slo.ttft_seconds !== undefined && (t.ttft === undefined ? t.e2e > slo.ttft_seconds : t.ttft > slo.ttft_seconds)
  const itlOver = slo.itl_p99_seconds !== undefined && r.itlP99 !== undefined && r.itlP99 > slo.itl_p99_seconds
  if (r.outcome === 'error') return callerError(r.statusCode) ? undefined : SloVerdict.missed
  if (r.outcome === 'cancelled') return ttftOver || itlOver ? SloVerdict.missed : undefined
  if (t.ttft === undefined) return undefined
  return ttftOver || itlOver ? SloVerdict.missed : SloVerdict.met
}
