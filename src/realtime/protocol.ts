import type { Json } from '../parsers/json.ts'
import type { Outcome } from '../timing/measurement.ts'
import type { RealtimeUsage, ResponseTiming } from '../timing/realtime-timing.ts'

/**
 * The seam between a realtime session and one provider's event protocol (OpenAI Realtime,
 * Gemini Live): the session hands each side's JSON messages over with their arrival time; the
 * protocol keeps its responses' timelines and hands each finished response back. Like a stream
 * parser, a protocol never throws and trusts no shape (json.ts guards).
 */

/** A response that ended, with its figures. */
export interface FinishedResponse {
  /** The provider's id (`resp_…`), when it gave one. */
  readonly id: string | undefined
  /** When it was asked for, and when it ended (ms, monotonic). */
  readonly start: number | undefined
  readonly end: number
  readonly outcome: Outcome
  /** The provider's reason, when it gave one (a status detail, an error code); bounded. */
  readonly detail: string | undefined
  readonly timing: ResponseTiming
  readonly usage: RealtimeUsage | undefined
}

export interface ProtocolContext {
  /** Tokens of a text or transcript delta (the route's tokenizer for the session's model). */
  countTokens(text: string): number
  /** A response ended (called once per response). */
  finished(response: FinishedResponse): void
  /** The session's model, once a message names it. */
  model(name: string): void
}

export interface RealtimeProtocol {
  /** A message from the client, at `at`. */
  client(message: Json, at: number): void
  /** A message from the upstream, at `at`. */
  server(message: Json, at: number): void
  /** Responses asked for or streaming now. */
  readonly inFlight: number
  /** The session ended at `at`: every response still open ends with `outcome`. */
  end(outcome: Outcome, at: number): void
}

/** The longest provider reason a response keeps. */
const MAX_DETAIL = 100

/** A provider string, cut to MAX_DETAIL characters. */
export function detailOf(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value.slice(0, MAX_DETAIL) : undefined
}
