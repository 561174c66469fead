import type { StreamSummary } from './types.ts'

/** The upstream's own report of where a request's time went; the proxy's own figures are never derived from it. */

/** The `phase` values of llm_upstream_reported_seconds. */
export const ReportedPhase = {
  /** Waiting in the upstream's queue before any work on the request. */
  queue: 'queue',
  /** Loading the model into memory. */
  load: 'load',
  /** Prompt processing (prefill), up to the first generated token. */
  prompt: 'prompt',
  /** Decoding the output tokens. */
  generation: 'generation',
  /** The upstream's whole processing of the request. */
  total: 'total',
} as const
export type ReportedPhase = (typeof ReportedPhase)[keyof typeof ReportedPhase]

export const REPORTED_PHASES: readonly ReportedPhase[] = Object.values(ReportedPhase)

/** Seconds by phase, only the phases the upstream reported. */
export type ReportedTimes = Partial<Record<ReportedPhase, number>>

/** The unit a provider writes a duration in, as a factor to seconds. */
export const Unit = { ns: 1e-9, ms: 1e-3, s: 1 } as const

/** No proxied request runs for a day (seconds): a longer report is a unit mix-up or garbage. */
export const MAX_REPORTED_SECONDS = 86_400

/** A reported duration in seconds, or undefined when it is not a sane one (never recorded). */
export function reportedSeconds(value: unknown, unit: number): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return undefined
  const seconds = value * unit
  return seconds <= MAX_REPORTED_SECONDS ? seconds : undefined
}

/** Records one reported phase; a later report replaces it (llama.cpp sends running `timings` on every chunk). */
export function reportTime(summary: StreamSummary, phase: ReportedPhase, value: unknown, unit: number): void {
  const seconds = reportedSeconds(value, unit)
  if (seconds === undefined) return
  summary.reported ??= {}
  summary.reported[phase] = seconds
}

/** The part of the first token's wait the upstream accounts for (queue + load + prompt), if reported. */
export function reportedBeforeFirstToken(reported: ReportedTimes | undefined): number | undefined {
  if (reported === undefined) return undefined
  const { queue, load, prompt } = reported
  if (queue === undefined && load === undefined && prompt === undefined) return undefined
  return (queue ?? 0) + (load ?? 0) + (prompt ?? 0)
}
