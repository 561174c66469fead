import { randomFillSync } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'

/**
 * A request's place in a trace, decided when its headers arrive (`otel.traces` on): the caller's
 * W3C trace context (https://www.w3.org/TR/trace-context/), parsed here by the spec's rules, and
 * the ids of tokentap's own span, made up now so that `propagate` can send them upstream before
 * the span exists (it is built when the request has ended, metrics/otel/traces.ts).
 */

/** The caller's span, from a valid `traceparent` (and its `tracestate`). */
export interface CallerSpan {
  readonly traceId: string
  readonly spanId: string
  /** The caller's `sampled` flag (bit 0 of trace-flags). */
  readonly sampled: boolean
  /** The caller's `tracestate`, as sent (undefined when absent or too long to be one). */
  readonly traceState: string | undefined
}

/** tokentap's span of one request: its ids, and the caller's span it is a child of. */
export interface TraceStart {
  /** 32 lower-case hex digits: the caller's trace id, else a new one. */
  readonly traceId: string
  /** 16 lower-case hex digits. */
  readonly spanId: string
  readonly parent: CallerSpan | undefined
}

/** A span's ids, as exemplars carry them. */
export interface TraceIds {
  readonly traceId: string
  readonly spanId: string
}

/** version "-" trace-id "-" parent-id "-" trace-flags, lower-case hex only (W3C Trace Context §3.2.2). */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})/
const ZERO_TRACE = '0'.repeat(32)
const ZERO_SPAN = '0'.repeat(16)
/**
 * A `tracestate` longer than this is not kept: 32 members of at most 256 + 256 characters is the
 * spec's bound (§3.3.1.1), far over what anyone sends; the SDK drops members past 32 itself.
 */
const MAX_TRACESTATE = 16 * 1024

/**
 * The caller's span from its `traceparent`, or undefined when there is none or it is invalid
 * (then the request starts a trace of its own, as the spec says a receiver does). Version 00 is
 * exactly 55 characters; a later version (not ff) may carry more after a `-`, and its first four
 * fields are read as 00's (§3.2.4). A repeated header arrives joined with `, ` and is invalid.
 */
export function parseTraceparent(headers: IncomingHttpHeaders): CallerSpan | undefined {
  const value = headers.traceparent
  if (typeof value !== 'string') return undefined
  const m = TRACEPARENT.exec(value)
  if (m === null) return undefined
  const [, version, traceId, spanId, flags] = m
  if (version === 'ff') return undefined
  if (version === '00' ? value.length !== 55 : value.length > 55 && value[55] !== '-') return undefined
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined
  const state = headers.tracestate
  const traceState = typeof state === 'string' && state.length > 0 && state.length <= MAX_TRACESTATE ? state : undefined
  return { traceId, spanId, sampled: (Number.parseInt(flags, 16) & 1) === 1, traceState }
}

/** The `traceparent` naming tokentap's span as the parent of the upstream call. */
export function traceparentOf(start: TraceStart, sampled: boolean): string {
  return `00-${start.traceId}-${start.spanId}-${sampled ? '01' : '00'}`
}

/** Random bytes for ids: one system call per this many requests (as RequestIds does). */
const POOL_BYTES = 24 * 512

/** Makes up span and trace ids from a pool of random bytes (never all zeros: the spec's invalid id). */
export class TraceIdSource {
  readonly #pool = Buffer.alloc(POOL_BYTES)
  #at = POOL_BYTES

  /** The ids of a request's span: a child of the caller's span when `headers` carry a valid one. */
  start(headers: IncomingHttpHeaders): TraceStart {
    const parent = parseTraceparent(headers)
    const spanId = this.#hex(8, ZERO_SPAN)
    return { traceId: parent?.traceId ?? this.#hex(16, ZERO_TRACE), spanId, parent }
  }

  /** A span id alone (a span under one whose trace is known: a realtime response under its session). */
  spanId(): string {
    return this.#hex(8, ZERO_SPAN)
  }

  #hex(bytes: number, zero: string): string {
    if (this.#at + bytes > POOL_BYTES) {
      randomFillSync(this.#pool)
      this.#at = 0
    }
    const id = this.#pool.toString('hex', this.#at, this.#at + bytes)
    this.#at += bytes
    return id === zero ? this.#hex(bytes, zero) : id
  }
}
