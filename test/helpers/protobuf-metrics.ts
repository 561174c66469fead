import protobuf from 'protobufjs'
import { repoPath } from './paths.ts'

/**
 * Decodes Prometheus's delimited protobuf exposition with protobufjs and the official
 * `metrics.proto` (prometheus/client_model v0.6.2, vendored in test/fixtures/prometheus), so a
 * test reads what Prometheus reads, not what tokentap's own writer meant to write.
 */

export interface PbLabel {
  readonly name: string
  readonly value: string
}
interface PbExemplar {
  readonly label: readonly PbLabel[]
  readonly value: number
  readonly timestamp?: { readonly seconds: number; readonly nanos?: number }
}
export interface PbHistogram {
  readonly sample_count?: number
  readonly sample_count_float?: number
  readonly sample_sum: number
  readonly bucket: readonly { readonly cumulative_count?: number; readonly upper_bound: number; readonly exemplar?: PbExemplar }[]
  readonly schema?: number
  readonly zero_threshold?: number
  readonly zero_count?: number
  readonly positive_span: readonly { readonly offset: number; readonly length: number }[]
  readonly positive_delta: readonly number[]
  readonly positive_count: readonly number[]
  readonly exemplars: readonly PbExemplar[]
}
interface PbMetric {
  readonly label: readonly PbLabel[]
  readonly counter?: { readonly value: number }
  readonly gauge?: { readonly value: number }
  readonly untyped?: { readonly value: number }
  readonly histogram?: PbHistogram
}
export interface PbFamily {
  readonly name: string
  readonly help: string
  readonly type: string
  readonly metric: readonly PbMetric[]
}

let familyType: protobuf.Type | undefined

function loadFamilyType(): protobuf.Type {
  if (familyType === undefined) {
    const root = new protobuf.Root()
    root.loadSync(repoPath('test', 'fixtures', 'prometheus', 'metrics.proto'), { keepCase: true })
    familyType = root.lookupType('io.prometheus.client.MetricFamily')
  }
  return familyType
}

/** Every MetricFamily of a delimited exposition, as plain objects (enums as names, 64-bit integers as numbers). */
export function decodeFamilies(body: Uint8Array): PbFamily[] {
  const type = loadFamilyType()
  const reader = protobuf.Reader.create(body)
  const out: PbFamily[] = []
  while (reader.pos < reader.len) {
    const message = type.decodeDelimited(reader)
    out.push(type.toObject(message, { enums: String, longs: Number, arrays: true, defaults: false }) as PbFamily)
  }
  return out
}

/** A native histogram's buckets as index → count (spans and deltas, or absolute counts, undone). */
export function nativeBuckets(h: PbHistogram): Map<number, number> {
  const out = new Map<number, number>()
  let index = 0
  let k = 0
  let count = 0
  for (let s = 0; s < h.positive_span.length; s++) {
    const span = h.positive_span[s]
    index += s === 0 ? span.offset : span.offset + 1
    for (let j = 0; j < span.length; j++) {
      if (j > 0) index++
      count = h.positive_delta.length > 0 ? count + h.positive_delta[k] : h.positive_count[k]
      k++
      if (count !== 0) out.set(index, count)
    }
  }
  return out
}

/** `{name: value}` of a metric's labels. */
export const labelsOf = (m: { readonly label: readonly PbLabel[] }): Record<string, string> => Object.fromEntries(m.label.map((l) => [l.name, l.value]))
