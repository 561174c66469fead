import type { Json } from '../parsers/json.ts'
import type { Outcome } from '../timing/measurement.ts'
import type { FinishedResponse } from '../timing/realtime-timing.ts'

export type { FinishedResponse }

/**
 * The seam between a realtime session and one provider's event protocol (OpenAI Realtime,
 * Gemini Live): the session hands each side's JSON messages over with their arrival time; the
 * protocol keeps its responses' timelines and hands each finished response back. Like a stream
 * parser, a protocol never throws and trusts no shape (json.ts guards).
 */

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
