import { join } from 'node:path'
import protobuf from 'protobufjs'
import { repoPath } from './paths.ts'
import { startUpstream } from './upstream.ts'

/**
 * A real OTLP/HTTP receiver on port 0, metrics and traces. It decodes each ExportMetricsServiceRequest
 * (and each ExportTraceServiceRequest, posted to a path ending in `/v1/traces`) with
 * the OTLP proto definitions (test/fixtures/otlp-proto, from open-telemetry/opentelemetry-proto):
 * protobuf bodies with `decode`, JSON bodies with `fromObject` (the OTLP/JSON mapping of the same
 * messages), so both encodings are read into one shape and a test asserts on figures, not bytes.
 */

const PROTO_DIR = repoPath('test', 'fixtures', 'otlp-proto')
const root = new protobuf.Root()
root.resolvePath = (_origin, target) => join(PROTO_DIR, target)
root.loadSync('opentelemetry/proto/collector/metrics/v1/metrics_service.proto')
root.loadSync('opentelemetry/proto/collector/trace/v1/trace_service.proto')
const Request = root.lookupType('opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest')
const TraceRequest = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest')

type AttributeValue = string | boolean | number
type Attrs = Record<string, AttributeValue>

export interface Point {
  readonly attributes: Attrs
  readonly count: number
  readonly sum: number
  readonly min: number | undefined
  readonly max: number | undefined
  readonly bucketCounts: number[]
  readonly explicitBounds: number[]
  readonly startTimeUnixNano: bigint
  readonly timeUnixNano: bigint
  /** An ExponentialHistogram point's scale, zero count and positive buckets (undefined for explicit points). */
  readonly exponential?: { readonly scale: number; readonly zeroCount: number; readonly offset: number; readonly counts: number[] }
}

interface Metric {
  readonly name: string
  readonly unit: string
  readonly description: string
  /** 1 delta, 2 cumulative. */
  readonly temporality: number
  /** A Sum (counter) rather than a histogram: each point's `sum` is its value, `count` 0. */
  readonly monotonicSum?: boolean
  readonly points: Point[]
}

export interface Export {
  readonly path: string
  readonly headers: Record<string, string | string[] | undefined>
  readonly resource: Attrs
  readonly scope: { readonly name: string; readonly version: string | undefined }
  /** By metric name. */
  readonly metrics: Map<string, Metric>
}

/** One exported span: ids as lower-case hex, times in epoch nanoseconds. */
export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  /** '' for a root span. */
  readonly parentSpanId: string
  readonly traceState: string
  /** The span's W3C trace flags (bit 0: sampled) as the SDK wrote them. */
  readonly flags: number
  readonly name: string
  /** 3: CLIENT. */
  readonly kind: number
  readonly startTimeUnixNano: bigint
  readonly endTimeUnixNano: bigint
  readonly attributes: Attrs
  readonly events: readonly { readonly name: string; readonly timeUnixNano: bigint; readonly attributes: Attrs }[]
  /** 0 unset, 1 ok, 2 error. */
  readonly status: { readonly code: number; readonly message: string }
  readonly resource: Attrs
  readonly scope: string
}

export interface OtlpReceiver {
  readonly url: string
  readonly received: Export[]
  /** Every span of every traces export, in arrival order. */
  readonly spans: ReceivedSpan[]
  /** Status to answer with (200 by default). */
  status: number
  /** ms to wait before answering. */
  delayMs: number
  close(): Promise<void>
}

interface AnyValue {
  stringValue?: string
  boolValue?: boolean
  intValue?: string
  doubleValue?: number
}
interface KeyValue {
  key: string
  value: AnyValue
}
interface RawPoint {
  attributes?: KeyValue[]
  count?: string
  sum?: number
  min?: number
  max?: number
  bucketCounts?: string[]
  explicitBounds?: number[]
  startTimeUnixNano?: string
  timeUnixNano?: string
}
interface RawExponentialPoint extends RawPoint {
  scale?: number
  zeroCount?: string
  positive?: { offset?: number; bucketCounts?: string[] }
}
interface RawMetric {
  name: string
  unit?: string
  description?: string
  histogram?: { aggregationTemporality?: number; dataPoints?: RawPoint[] }
  exponentialHistogram?: { aggregationTemporality?: number; dataPoints?: RawExponentialPoint[] }
  sum?: { aggregationTemporality?: number; isMonotonic?: boolean; dataPoints?: (RawPoint & { asInt?: string; asDouble?: number })[] }
}
interface RawRequest {
  resourceMetrics?: { resource?: { attributes?: KeyValue[] }; scopeMetrics?: { scope?: { name?: string; version?: string }; metrics?: RawMetric[] }[] }[]
}

const attributeValue = (v: AnyValue): AttributeValue => v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue as number))

/** Attributes as a plain object (string, boolean and number values). */
const attrsOf = (kvs: KeyValue[] | undefined): Attrs => Object.fromEntries((kvs ?? []).map((kv) => [kv.key, attributeValue(kv.value)]))

function normalize(raw: RawRequest, path: string, headers: Export['headers']): Export {
  if (raw.resourceMetrics?.length !== 1) throw new Error(`expected one ResourceMetrics, got ${raw.resourceMetrics?.length}`)
  const rm = raw.resourceMetrics[0]
  // The SDK's instruments and the pre-aggregated one (a MetricProducer) come as two ScopeMetrics of one scope.
  const scopes = rm.scopeMetrics ?? []
  const names = new Set(scopes.map((sm) => `${sm.scope?.name ?? ''}@${sm.scope?.version ?? ''}`))
  if (names.size !== 1) throw new Error(`expected one instrumentation scope, got ${[...names].join(', ')}`)
  const sm = scopes[0]
  const metrics = new Map<string, Metric>()
  for (const m of scopes.flatMap((x) => x.metrics ?? [])) {
    if (metrics.has(m.name)) throw new Error(`${m.name} twice`)
    if (m.sum !== undefined) {
      metrics.set(m.name, {
        name: m.name,
        unit: m.unit ?? '',
        description: m.description ?? '',
        temporality: m.sum.aggregationTemporality ?? 0,
        monotonicSum: m.sum.isMonotonic === true,
        points: (m.sum.dataPoints ?? []).map((p) => ({
          attributes: attrsOf(p.attributes),
          count: 0,
          sum: p.asInt !== undefined ? Number(p.asInt) : (p.asDouble ?? 0),
          min: undefined,
          max: undefined,
          bucketCounts: [],
          explicitBounds: [],
          startTimeUnixNano: BigInt(p.startTimeUnixNano ?? 0),
          timeUnixNano: BigInt(p.timeUnixNano ?? 0),
        })),
      })
      continue
    }
    const h = m.histogram ?? m.exponentialHistogram
    if (h === undefined) throw new Error(`${m.name} is no histogram`)
    metrics.set(m.name, {
      name: m.name,
      unit: m.unit ?? '',
      description: m.description ?? '',
      temporality: h.aggregationTemporality ?? 0,
      points: (h.dataPoints ?? []).map((p: RawExponentialPoint) => ({
        attributes: attrsOf(p.attributes),
        count: Number(p.count ?? 0),
        sum: p.sum ?? 0,
        min: p.min,
        max: p.max,
        bucketCounts: (p.bucketCounts ?? []).map(Number),
        explicitBounds: p.explicitBounds ?? [],
        startTimeUnixNano: BigInt(p.startTimeUnixNano ?? 0),
        timeUnixNano: BigInt(p.timeUnixNano ?? 0),
        exponential:
          m.exponentialHistogram === undefined
            ? undefined
            : { scale: p.scale ?? 0, zeroCount: Number(p.zeroCount ?? 0), offset: p.positive?.offset ?? 0, counts: (p.positive?.bucketCounts ?? []).map(Number) },
      })),
    })
  }
  return { path, headers, resource: attrsOf(rm.resource?.attributes), scope: { name: sm.scope?.name ?? '', version: sm.scope?.version }, metrics }
}

const TO_OBJECT = { longs: String, enums: Number, arrays: true } as const

interface RawSpan {
  traceId?: string
  spanId?: string
  parentSpanId?: string
  traceState?: string
  flags?: number
  name?: string
  kind?: number
  startTimeUnixNano?: string
  endTimeUnixNano?: string
  attributes?: KeyValue[]
  events?: { name?: string; timeUnixNano?: string; attributes?: KeyValue[] }[]
  status?: { code?: number; message?: string }
}
interface RawTraceRequest {
  resourceSpans?: { resource?: { attributes?: KeyValue[] }; scopeSpans?: { scope?: { name?: string }; spans?: RawSpan[] }[] }[]
}

/** Decodes one ExportTraceServiceRequest (protobuf) into its spans. */
export function decodeTraceRequest(body: Buffer, contentType: string | undefined = 'application/x-protobuf'): ReceivedSpan[] {
  if (contentType !== 'application/x-protobuf') throw new Error(`unexpected content-type ${contentType}`)
  // Bytes as base64 (protobufjs's toObject), turned into hex here: trace and span ids read as W3C writes them.
  const raw = TraceRequest.toObject(TraceRequest.decode(body), { ...TO_OBJECT, bytes: String }) as RawTraceRequest
  const hex = (b64: string | undefined): string => Buffer.from(b64 ?? '', 'base64').toString('hex')
  const out: ReceivedSpan[] = []
  for (const rs of raw.resourceSpans ?? []) {
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          traceState: s.traceState ?? '',
          flags: s.flags ?? 0,
          name: s.name ?? '',
          kind: s.kind ?? 0,
          startTimeUnixNano: BigInt(s.startTimeUnixNano ?? 0),
          endTimeUnixNano: BigInt(s.endTimeUnixNano ?? 0),
          attributes: attrsOf(s.attributes),
          events: (s.events ?? []).map((e) => ({ name: e.name ?? '', timeUnixNano: BigInt(e.timeUnixNano ?? 0), attributes: attrsOf(e.attributes) })),
          status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
          resource: attrsOf(rs.resource?.attributes),
          scope: ss.scope?.name ?? '',
        })
      }
    }
  }
  return out
}

/** Decodes one request body by its content type (protobuf or JSON). */
function decodeExport(body: Buffer, contentType: string | undefined, path = '', headers: Export['headers'] = {}): Export {
  const message =
    contentType === 'application/json' ? Request.fromObject(JSON.parse(body.toString('utf8')) as Record<string, unknown>) : contentType === 'application/x-protobuf' ? Request.decode(body) : undefined
  if (message === undefined) throw new Error(`unexpected content-type ${contentType}`)
  return normalize(Request.toObject(message, TO_OBJECT) as RawRequest, path, headers)
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const received: Export[] = []
  const spans: ReceivedSpan[] = []
  const state = { status: 200, delayMs: 0 }
  const upstream = await startUpstream(async (req, res, body) => {
    if (state.delayMs > 0) await new Promise((r) => setTimeout(r, state.delayMs))
    if (state.status === 200 && (req.url ?? '').endsWith('/v1/traces')) spans.push(...decodeTraceRequest(body, req.headers['content-type']))
    else if (state.status === 200) received.push(decodeExport(body, req.headers['content-type'], req.url ?? '', req.headers))
    // An empty ExportMetricsServiceResponse, in the request's encoding.
    res.writeHead(state.status, { 'content-type': req.headers['content-type'] ?? 'application/x-protobuf' })
    res.end(req.headers['content-type'] === 'application/json' ? '{}' : '')
  })
  return {
    url: upstream.url,
    received,
    spans,
    get status() {
      return state.status
    },
    set status(v: number) {
      state.status = v
    },
    get delayMs() {
      return state.delayMs
    },
    set delayMs(v: number) {
      state.delayMs = v
    },
    close: () => upstream.close(),
  }
}

/** The points of one metric in an export ([] when it has none). */
export const pointsOf = (e: Export | undefined, name: string): Point[] => e?.metrics.get(name)?.points ?? []
