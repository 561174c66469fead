import { randomFillSync } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'

/**
 * A request's place in a W3C trace (https://www.w3.org/TR/trace-context/): its own span ids are
 * made up when its headers arrive, so `propagate` can send them upstream before the span exists.
 */

export interface CallerSpan {
  readonly traceId: string
  readonly spanId: string
  readonly sampled: boolean
  /** Undefined when absent or too long to be one. */
  readonly traceState: string | undefined
}

export interface TraceStart {
  /** 32 lower-case hex digits: the caller's trace id, else a new one. */
  readonly traceId: string
  /** 16 lower-case hex digits. */
  readonly spanId: string
  readonly parent: CallerSpan | undefined
}

export interface TraceIds {
  readonly traceId: string
  readonly spanId: string
}

/** version "-" trace-id "-" parent-id "-" trace-flags, lower-case hex only (W3C Trace Context §3.2.2). */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})/
const ZERO_TRACE = '0'.repeat(32)
const ZERO_SPAN = '0'.repeat(16)
/** The spec's bound (§3.3.1.1: 32 members of at most 256 + 256 characters). */
const MAX_TRACESTATE = 16 * 1024

/**
 * Undefined when invalid, so the request starts a trace of its own as the spec says. A later
 * version (not ff) may carry more after a `-`, its first four fields read as 00's (§3.2.4).
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

export function traceparentOf(start: TraceStart, sampled: boolean): string {
  return `00-${start.traceId}-${start.spanId}-${sampled ? '01' : '00'}`
}

/** One system call per this many requests (as RequestIds does). */
const POOL_BYTES = 24 * 512

/** Never all zeros: the spec's invalid id. */
export class TraceIdSource {
  readonly #pool = Buffer.alloc(POOL_BYTES)
  #at = POOL_BYTES

  start(headers: IncomingHttpHeaders): TraceStart {
    const parent = parseTraceparent(headers)
    const spanId = this.#hex(8, ZERO_SPAN)
    return { traceId: parent?.traceId ?? this.#hex(16, ZERO_TRACE), spanId, parent }
  }

  /** For a span under one whose trace is known (a realtime response under its session). */
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
