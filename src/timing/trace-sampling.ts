import { Outcome } from './measurement.ts'
import type { Measurement } from './measurement.ts'
import { SloVerdict } from './slo.ts'

/**
 * Which requests' spans are exported, decided once the request ended: those a `keep` rule names, else the
 * caller's `sampled` flag, else `ratio` by trace id (the same answer in every process, as OTel's
 * TraceIdRatioBased intends). A collector's tail sampling without its buffering.
 */

/** The `keep` rules (`otel.traces.sample.keep`). */
export const KEEP_RULES = ['error', 'stall', 'slo_miss', 'slow'] as const
type KeepRule = (typeof KEEP_RULES)[number]

export interface TraceSampling {
  /** Share of traces kept when no rule keeps them and no caller decided (0…1). */
  readonly ratio: number
  readonly keep: readonly KeepRule[]
  /** `slow`: E2E over this many seconds. */
  readonly slowSeconds: number
}

/** What the start decision reads of a request's trace start (record/trace-context.ts's TraceStart). */
interface SampledStart {
  /** The trace id's last 13 hex digits as a fraction of 2^52. */
  readonly sampleKey: number
  /** The caller's span, when it sent a trace context: its `sampled` flag decides. */
  readonly parent: { readonly sampled: boolean } | undefined
}

/** The decision at the request's start: the caller's flag, else the ratio on the trace id. */
export function sampledAtStart(start: SampledStart, ratio: number): boolean {
  if (start.parent !== undefined) return start.parent.sampled
  return start.sampleKey < ratio
}

/** Whether a `keep` rule names this request. */
function keptByRule(m: Measurement, s: TraceSampling): boolean {
  for (const rule of s.keep) {
    if (rule === 'error' && m.outcome === Outcome.error) return true
    if (rule === 'stall' && m.stalls > 0) return true
    if (rule === 'slo_miss' && m.slo === SloVerdict.missed) return true
    if (rule === 'slow' && m.timing.e2e > s.slowSeconds) return true
  }
  return false
}

/** Whether the request's span is exported. */
export function keepTrace(start: SampledStart, m: Measurement, s: TraceSampling): boolean {
  return keptByRule(m, s) || sampledAtStart(start, s.ratio)
}
