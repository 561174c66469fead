import type { Config } from '../config/schema.ts'
import { Counter } from '../metrics/prometheus/counter.ts'
import { CollectedGauge } from '../metrics/prometheus/gauge.ts'
import { Histogram } from '../metrics/prometheus/histogram.ts'
import type { NativeOptions } from '../metrics/prometheus/histogram.ts'
import { SERIES_LABELS } from '../record/observations.ts'
import type { SeriesLabels as Labels } from '../record/observations.ts'
import type { FinishedResponse } from './protocol.ts'
import type { MetricsRegistry } from '../metrics/prometheus/registry.ts'
import type { RealtimeListener, RealtimeSessions } from './realtime.ts'
import type { SessionSummary } from './session.ts'
import { realtimeErrorTypeOf } from '../proxy/upstream-errors.ts'
import type { ErrorType } from '../proxy/upstream-errors.ts'

/**
 * The llm_realtime_ metrics (the CONTRACT's "Realtime sessions"): definitions, and what a
 * finished response and a finished session add to them. `responseObservations` is the one home
 * of the recording rules (which figure is observed when); the metrics only apply its result.
 */

/** A listener's silence per audio response: 10 ms (none to hear) … 1 min. 0.25 is a bound: the alert's threshold. */
const UNDERRUN_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60] as const

/** What one finished response adds to the metrics. */
export interface ResponseObservations {
  readonly outcome: string
  /** Who is to blame (the `error_type` label): `none` for ok, by the upstream-error table. */
  readonly errorType: ErrorType
  readonly ttft: number | undefined
  readonly ttfa: number | undefined
  /** Token-weighted ITL: pairs of value and weight. */
  readonly itl: readonly (readonly [number, number])[]
  /** Undefined for a response without audio. */
  readonly underrun: number | undefined
  /** Provider-reported tokens, by direction and modality; only counts above 0. */
  readonly tokens: readonly { readonly direction: 'input' | 'output'; readonly modality: 'text' | 'audio'; readonly count: number }[]
}

/**
 * TTFT, time to first audio, ITL and the underrun are observed whatever the outcome (as the HTTP
 * TTFT and ITL are: a cancelled answer's first token still came when it came); tokens only as the
 * provider reported them.
 */
export function responseObservations(r: FinishedResponse): ResponseObservations {
  const tokens: { direction: 'input' | 'output'; modality: 'text' | 'audio'; count: number }[] = []
  const u = r.usage
  if (u !== undefined) {
    for (const [direction, modality, count] of [
      ['input', 'text', u.inputText],
      ['input', 'audio', u.inputAudio],
      ['output', 'text', u.outputText],
      ['output', 'audio', u.outputAudio],
    ] as const) {
      if (count > 0) tokens.push({ direction, modality, count })
    }
  }
  return { outcome: r.outcome, errorType: realtimeErrorTypeOf(r.outcome, r.detail), ttft: r.timing.ttft, ttfa: r.timing.ttfa, itl: r.timing.itl, underrun: r.timing.underrun, tokens }
}

/** A session's label values in the order of the policy's label names (the tenant last, when on). */
const valuesOf = (l: Labels): string[] => (l.tenant === undefined ? [l.provider, l.model, l.route] : [l.provider, l.model, l.route, l.tenant])

export class RealtimeMetrics {
  readonly sessions: Counter
  readonly inFlight: CollectedGauge
  readonly responses: Counter
  readonly ttft: Histogram
  readonly ttfa: Histogram
  readonly itl: Histogram
  readonly underrun: Histogram
  readonly tokens: Counter

  /** `open`: the labels of every open session, counted at each scrape. */
  /** `labelNames`: the policy's (provider, model, route, and `tenant` with `metrics.tenant` on). */
  constructor(buckets: Config['metrics']['buckets'], open: (add: (labels: readonly string[], value: number) => void) => void, labelNames: readonly string[] = SERIES_LABELS, native?: NativeOptions) {
    this.sessions = new Counter({
      name: 'llm_realtime_sessions_total',
      help: 'Realtime (WebSocket) sessions by how they ended: ok (closed normally), error (refused or failed upgrade, a failure close code, the upstream gone, a proxy timeout), cancelled (the client gone without a close).',
      labelNames: [...labelNames, 'outcome'],
    })
    this.inFlight = new CollectedGauge({ name: 'llm_realtime_sessions_in_flight', help: 'Realtime (WebSocket) sessions open now.', labelNames, collect: open })
    this.responses = new Counter({
      name: 'llm_realtime_responses_total',
      help: 'Realtime responses by outcome: ok, error (an error event or a failed response.done), cancelled (response.cancel, interrupted, or the client left); error_type: who is to blame, from the error code the provider named (none for ok).',
      labelNames: [...labelNames, 'outcome', 'error_type'],
    })
    this.ttft = new Histogram({
      name: 'llm_realtime_time_to_first_token_seconds',
      help: "Realtime response start (the client's response.create, the server's input_audio_buffer.committed, Gemini: the client's turn end) to the first text, transcript or audio delta.",
      labelNames,
      buckets: buckets.ttft,
      native,
    })
    this.ttfa = new Histogram({ name: 'llm_realtime_time_to_first_audio_seconds', help: 'Realtime response start to the first audio delta.', labelNames, buckets: buckets.ttft, native })
    this.itl = new Histogram({
      name: 'llm_realtime_inter_token_latency_seconds',
      help: 'Gaps between text/transcript deltas of a realtime response, token-weighted: each delta j>=2 adds k_j observations of gap_j/k_j.',
      labelNames,
      buckets: buckets.itl,
      native,
    })
    this.underrun = new Histogram({
      name: 'llm_realtime_audio_underrun_seconds',
      help: 'Per realtime response with audio: for a listener who starts playing at the first audio delta, the total time with nothing left to play (audio arriving slower than it plays).',
      labelNames,
      buckets: UNDERRUN_BUCKETS,
      native,
    })
    this.tokens = new Counter({
      name: 'llm_realtime_tokens_total',
      help: "Realtime tokens from the provider's usage (response.done; Gemini: usageMetadata), by direction (input, output) and modality (text, audio).",
      labelNames: [...labelNames, 'direction', 'modality'],
    })
  }

  /** Every metric, in scrape order. */
  all(): readonly (Histogram | Counter | CollectedGauge)[] {
    return [this.sessions, this.inFlight, this.responses, this.ttft, this.ttfa, this.itl, this.underrun, this.tokens]
  }

  readonly listener: RealtimeListener = {
    response: (_who, l: Labels, r: FinishedResponse) => {
      const o = responseObservations(r)
      this.responses.labels(...valuesOf(l), o.outcome, o.errorType).inc()
      if (o.ttft !== undefined) this.ttft.labels(...valuesOf(l)).observe(o.ttft)
      if (o.ttfa !== undefined) this.ttfa.labels(...valuesOf(l)).observe(o.ttfa)
      if (o.itl.length > 0) {
        const itl = this.itl.labels(...valuesOf(l))
        for (const [value, weight] of o.itl) itl.observe(value, weight)
      }
      if (o.underrun !== undefined) this.underrun.labels(...valuesOf(l)).observe(o.underrun)
      for (const t of o.tokens) this.tokens.labels(...valuesOf(l), t.direction, t.modality).inc(t.count)
    },
    session: (_who, l: Labels, s: SessionSummary) => {
      this.inFlight.touch(valuesOf(l))
      this.sessions.labels(...valuesOf(l), s.outcome).inc()
    },
  }
}

/** Creates the llm_realtime_ metrics of `realtime`'s sessions in `registry` (the plugin's one line). */
export function registerRealtimeMetrics(
  realtime: RealtimeSessions,
  registry: MetricsRegistry,
  buckets: Config['metrics']['buckets'],
  labelNames?: readonly string[],
  native?: NativeOptions,
): RealtimeMetrics {
  const metrics = new RealtimeMetrics(
    buckets,
    (add) => {
      for (const session of realtime.open) add(realtime.inFlightValues(session), 1)
    },
    labelNames,
    native,
  )
  for (const m of metrics.all()) registry.register(m)
  realtime.listen(metrics.listener)
  return metrics
}
