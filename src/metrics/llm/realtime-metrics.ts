import type { Counter } from '../prometheus/counter.ts'
import type { CollectedGauge } from '../prometheus/gauge.ts'
import type { Histogram, NativeOptions } from '../prometheus/histogram.ts'
import type { MetricsRegistry } from '../prometheus/registry.ts'
import { SERIES_LABELS } from '../../record/labels.ts'
import type { LabelSet } from '../../record/labels.ts'
import type { ResponseObservations } from '../../record/observations.ts'
import type { RealtimeSink } from '../../record/recorder.ts'
import type { Outcome } from '../../timing/measurement.ts'
import { buildFamilies } from './families.ts'
import type { Buckets, Families, FamilyTable } from './families.ts'

/** The llm_realtime_ families (CONTRACT's "Realtime sessions") and what a finished response or session adds to them. */

/** A listener's silence per audio response: 10 ms (none to hear) … 1 min. 0.25 is a bound: the alert's threshold. */
const UNDERRUN_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60] as const

/** The llm_realtime_ families, in scrape order. */
const FAMILIES = {
  sessions: {
    name: 'llm_realtime_sessions_total',
    type: 'counter',
    extra: ['outcome'],
    help: 'Realtime (WebSocket) sessions by how they ended: ok (closed normally), error (refused or failed upgrade, a failure close code, the upstream gone, a proxy timeout), cancelled (the client gone without a close).',
  },
  inFlight: { name: 'llm_realtime_sessions_in_flight', type: 'gauge', help: 'Realtime (WebSocket) sessions open now.' },
  responses: {
    name: 'llm_realtime_responses_total',
    type: 'counter',
    extra: ['outcome', 'error_type'],
    help: 'Realtime responses by outcome: ok, error (an error event or a failed response.done), cancelled (response.cancel, interrupted, or the client left); error_type: who is to blame, from the error code the provider named (none for ok).',
  },
  ttft: {
    name: 'llm_realtime_time_to_first_token_seconds',
    type: 'histogram',
    buckets: 'ttft',
    help: "Realtime response start (the client's response.create, the server's input_audio_buffer.committed, Gemini: the client's turn end) to the first text, transcript or audio delta.",
  },
  ttfa: {
    name: 'llm_realtime_time_to_first_audio_seconds',
    type: 'histogram',
    buckets: 'ttft',
    help: 'Realtime response start to the first audio delta.',
  },
  itl: {
    name: 'llm_realtime_inter_token_latency_seconds',
    type: 'histogram',
    buckets: 'itl',
    help: 'Gaps between text/transcript deltas of a realtime response, token-weighted: each delta j>=2 adds k_j observations of gap_j/k_j.',
  },
  underrun: {
    name: 'llm_realtime_audio_underrun_seconds',
    type: 'histogram',
    buckets: UNDERRUN_BUCKETS,
    help: 'Per realtime response with audio: for a listener who starts playing at the first audio delta, the total time with nothing left to play (audio arriving slower than it plays).',
  },
  tokens: {
    name: 'llm_realtime_tokens_total',
    type: 'counter',
    extra: ['direction', 'modality'],
    help: "Realtime tokens from the provider's usage (response.done; Gemini: usageMetadata), by direction (input, output) and modality (text, audio).",
  },
} as const satisfies FamilyTable

/** The response figures one series takes as they are, each series made at its first value. */
const RESPONSE_SERIES = [
  { family: 'ttft', value: (o: ResponseObservations) => o.ttft },
  { family: 'ttfa', value: (o: ResponseObservations) => o.ttfa },
  { family: 'underrun', value: (o: ResponseObservations) => o.underrun },
] as const

export class RealtimeMetrics implements RealtimeSink {
  readonly families: Families<typeof FAMILIES>

  /** `open`: the labels of every open session, counted at each scrape; `labelNames`: the policy's. */
  constructor(
    buckets: Buckets,
    open: (add: (labels: readonly string[], value: number) => void) => void,
    labelNames: readonly string[] = SERIES_LABELS,
    native?: NativeOptions,
  ) {
    this.families = buildFamilies(FAMILIES, {
      names: { base: labelNames, banded: labelNames, inputBanded: labelNames },
      buckets,
      native,
      collect: open,
      stallSeconds: 0,
    })
  }

  /** Every metric, in scrape order. */
  all(): readonly (Histogram | Counter | CollectedGauge)[] {
    return Object.values(this.families)
  }

  response(o: ResponseObservations): void {
    const f = this.families
    const v = o.labelSet.values as string[]
    f.responses.labels(...v, o.outcome, o.errorType).inc()
    for (const s of RESPONSE_SERIES) {
      const value = s.value(o)
      if (value !== undefined) f[s.family].labels(...v).observe(value)
    }
    if (o.itl.length > 0) {
      const itl = f.itl.labels(...v)
      for (const [value, weight] of o.itl) itl.observe(value, weight)
    }
    for (const t of o.tokens) f.tokens.labels(...v, t.direction, t.modality).inc(t.count)
  }

  session(set: LabelSet, outcome: Outcome): void {
    this.families.inFlight.touch(set.values)
    this.families.sessions.labels(...(set.values as string[]), outcome).inc()
  }
}

/** What the realtime metrics need of the sessions: the open ones' labels at a scrape, and their sink list. */
interface Sessions<S> {
  readonly open: Iterable<S>
  inFlightValues(session: S): readonly string[]
  addSink(sink: RealtimeSink): void
}

/** Creates the llm_realtime_ metrics of `realtime`'s sessions in `registry` (the plugin's one line). */
export function registerRealtimeMetrics<S>(
  realtime: Sessions<S>,
  registry: MetricsRegistry,
  buckets: Buckets,
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
  realtime.addSink(metrics)
  return metrics
}
