import type { Measurement } from '../timing/measurement.ts'
import type { LabelSet } from './labels.ts'
import type { Observations, RecordPolicy, RequestFacts, ResponseObservations } from './observations.ts'
import type { Outcome } from '../timing/measurement.ts'

/** Where a finished exchange's Measurement goes: the policy makes Observations once, then each sink maps them in order. */

/** One output of finished requests. */
export type Sink = (o: Observations) => void

/** One output of finished realtime responses and sessions, with the label set they count under. */
export interface RealtimeSink {
  response(o: ResponseObservations): void
  session(set: LabelSet, outcome: Outcome): void
}

export class Recorder {
  readonly #policy: RecordPolicy
  readonly #sinks: Sink[]
  readonly #onError: (err: unknown, who: RequestFacts) => void

  /** `onError`: recording threw (measuring must never take the proxy down). */
  constructor(policy: RecordPolicy, sinks: readonly Sink[], onError: (err: unknown, who: RequestFacts) => void) {
    this.#policy = policy
    this.#sinks = [...sinks]
    this.#onError = onError
  }

  /** Adds a sink, after the others. */
  add(sink: Sink): void {
    this.#sinks.push(sink)
  }

  readonly record = (who: RequestFacts, m: Measurement): void => {
    const o = this.#policy.observe(who, m)
    for (const sink of this.#sinks) sink(o)
  }

  readonly onRecordError = (err: unknown, who: RequestFacts): void => this.#onError(err, who)
}
