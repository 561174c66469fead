import type { Json } from '../parsers/json.ts'
import type { Outcome } from '../timing/measurement.ts'
import type { FinishedResponse, ResponseTimeline } from '../timing/realtime-timing.ts'

export type { FinishedResponse }

/**
 * The seam between a realtime session and one provider's event protocol; like a stream parser, a
 * protocol never throws and trusts no shape (json.ts guards).
 */

export interface ProtocolContext {
  /** The route's tokenizer for the session's model. */
  countTokens(text: string): number
  /** Called once per response. */
  finished(response: FinishedResponse): void
  model(name: string): void
}

export type InFlightVisitor = (ref: object, start: number | undefined, timeline: ResponseTimeline | undefined) => void

export interface RealtimeProtocol {
  client(message: Json, at: number): void
  server(message: Json, at: number): void
  readonly inFlight: number
  /**
   * Visits each response in flight (those `end` would finish): `ref` is the same object while it stays in flight, and
   * `timeline` undefined while it was asked for and not begun (for the cluster's progress reports: cluster/realtime-progress.ts).
   */
  forEachInFlight(visit: InFlightVisitor): void
  /** Every response still open ends with `outcome`. */
  end(outcome: Outcome, at: number): void
}

/** The longest provider reason a response keeps. */
const MAX_DETAIL = 100

export function detailOf(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value.slice(0, MAX_DETAIL) : undefined
}
