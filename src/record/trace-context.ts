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
  /** The trace id's last 13 hex digits as a fraction of 2^52, what the ratio is compared with (timing/trace-sampling.ts). */
  readonly sampleKey: number
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

/** 2^52: the trace id's last 13 hex digits (52 bits) as a fraction of it; a double holds them exactly. */
const KEY_SPAN = 2 ** 52

/** A trace id's sample key (TraceStart's `sampleKey`), from its hex digits. */
export function sampleKeyOf(traceId: string): number {
  return Number.parseInt(traceId.slice(19), 16) / KEY_SPAN
}

/** One system call per this many requests (as RequestIds does). */
const POOL_BYTES = 24 * 512

/** Never all zeros: the spec's invalid id. */
export class TraceIdSource {
  readonly #pool = Buffer.alloc(POOL_BYTES)
  #at = POOL_BYTES

  /**
   * A new trace's ids come from one hex conversion of 24 random bytes, and its sample key from the
   * same bytes: every request pays this with spans on, most of them sampled out.
   */
  start(headers: IncomingHttpHeaders): TraceStart {
    const parent = parseTraceparent(headers)
    if (parent !== undefined)
      return { traceId: parent.traceId, spanId: this.spanId(), parent, sampleKey: sampleKeyOf(parent.traceId) }
    const pool = this.#fill(24)
    const at = this.#at
    this.#at += 24
    const ids = pool.toString('hex', at, at + 24)
    const traceId = ids.slice(0, 32)
    const spanId = ids.slice(32)
    if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return this.start(headers)
    // Bytes 9 to 15 of the trace id hold its last 13 hex digits but the first (byte 9's high half).
    const sampleKey = ((pool[at + 9] & 0x0f) * 2 ** 48 + pool.readUIntBE(at + 10, 6)) / KEY_SPAN
    return { traceId, spanId, parent: undefined, sampleKey }
  }

  /** For a span under one whose trace is known (a realtime response under its session). */
  spanId(): string {
    return this.#hex(8, ZERO_SPAN)
  }

  /** The pool, refilled when fewer than `bytes` are left. */
  #fill(bytes: number): Buffer {
    if (this.#at + bytes > POOL_BYTES) {
      randomFillSync(this.#pool)
      this.#at = 0
    }
    return this.#pool
  }

  #hex(bytes: number, zero: string): string {
    const id = this.#fill(bytes).toString('hex', this.#at, this.#at + bytes)
    this.#at += bytes
    return id === zero ? this.#hex(bytes, zero) : id
  }
}
