import type { StreamSummary } from './types.ts'

/**
 * The upstream's own account of where a request's time went, as it reports it in the response
 * (Ollama's final object, Groq's `x_groq.usage`, llama.cpp's `timings`, Bedrock's invocation
 * metrics): seconds by phase. A parser records what its provider reports and nothing else; the
 * proxy's own figures are measured, never derived from these.
 */

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

/**
 * A reported duration longer than this (seconds) is not believed: no request of a proxied
 * stream runs for a day, so such a value is a unit mix-up or garbage, not a timing.
 */
export const MAX_REPORTED_SECONDS = 86_400

/**
 * A duration the upstream reported, in seconds: a finite number ≥ 0 in `unit`, at most a day.
 * Anything else (a string, NaN, a negative, an absurd size) is undefined: never recorded.
 */
export function reportedSeconds(value: unknown, unit: number): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return undefined
  const seconds = value * unit
  return seconds <= MAX_REPORTED_SECONDS ? seconds : undefined
}

/**
 * Records one reported phase on the summary when the value is a sane duration; a later report
 * of the same phase (llama.cpp's running `timings` on every chunk) replaces the earlier one.
 */
export function reportTime(summary: StreamSummary, phase: ReportedPhase, value: unknown, unit: number): void {
  const seconds = reportedSeconds(value, unit)
  if (seconds === undefined) return
  summary.reported ??= {}
  summary.reported[phase] = seconds
}

/**
 * The part of the first token's wait the upstream accounts for: its reported queue + load +
 * prompt time, or undefined when it reported none of them.
 */
export function reportedBeforeFirstToken(reported: ReportedTimes | undefined): number | undefined {
  if (reported === undefined) return undefined
  const { queue, load, prompt } = reported
  if (queue === undefined && load === undefined && prompt === undefined) return undefined
  return (queue ?? 0) + (load ?? 0) + (prompt ?? 0)
}
