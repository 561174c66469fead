import type { Attributes, SpanStatusCode } from '@opentelemetry/api'
import type { AttributeKey } from './protobuf-writer.ts'
import type { EventRecord, SpanHead, SpanRecord } from './span-export.ts'

/**
 * Where a finished span is told, in the order an OTLP `Span` message holds it: `begin`, the
 * span's attributes, each event followed by its own attributes, `end`. The main thread's writer
 * (span-record-protobuf.ts's SpanWriter) puts it straight into protobuf, with no object built for
 * its attributes; `RecordOut` builds the SpanRecord the SDK's side reads (a caller's tracestate,
 * an injected exporter). One description of a span, two outputs (docs/performance.md, "Spans").
 */
export interface SpanOut {
  begin(head: SpanHead): void
  string(key: AttributeKey, value: string): void
  number(key: AttributeKey, value: number): void
  boolean(key: AttributeKey, value: boolean): void
  /** Starts an event (epoch ms): the attributes told after it are its own. */
  event(name: string, timeMs: number): void
  end(status: SpanStatusCode, statusMessage: string | undefined): void
}

/** A span told to a SpanOut. */
export type SpanDescription = (out: SpanOut) => void

/** The SpanRecord of a span told to it (`record` once `end` is told). */
export class RecordOut implements SpanOut {
  record: SpanRecord | undefined
  #head: SpanHead | undefined
  readonly #attributes: Attributes = {}
  readonly #events: EventRecord[] = []
  #current: Attributes = this.#attributes

  begin(head: SpanHead): void {
    this.#head = head
  }

  string(key: AttributeKey, value: string): void {
    this.#current[key.name] = value
  }

  number(key: AttributeKey, value: number): void {
    this.#current[key.name] = value
  }

  boolean(key: AttributeKey, value: boolean): void {
    this.#current[key.name] = value
  }

  event(name: string, timeMs: number): void {
    const attributes: Attributes = {}
    this.#events.push({ name, timeMs, attributes })
    this.#current = attributes
  }

  end(status: SpanStatusCode, statusMessage: string | undefined): void {
    if (this.#head === undefined) throw new Error('a span ended before it began')
    const { name, traceId, spanId, parent, startMs, endMs, durationMs } = this.#head
    this.record = {
      name,
      traceId,
      spanId,
      parent,
      startMs,
      endMs,
      durationMs,
      attributes: this.#attributes,
      events: this.#events,
      status,
      statusMessage,
    }
  }
}

/** The record of a span description. */
export function recordOf(describe: SpanDescription): SpanRecord {
  const out = new RecordOut()
  describe(out)
  if (out.record === undefined) throw new Error('a span description did not end its span')
  return out.record
}
