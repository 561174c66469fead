import t from 'tap'
import type { Test } from 'tap'
import { execFileSync } from 'node:child_process'
import type { IncomingHttpHeaders } from 'node:http'
import { pathToFileURL } from 'node:url'
import { distPath } from '../helpers/paths.ts'
import { fixture } from '../helpers/fixtures.ts'
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts'
import type { OtlpReceiver, ReceivedSpan } from '../helpers/otlp-receiver.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { eventually, respond, sessionSummary, tapedClient } from '../helpers/realtime.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { parseOpenMetrics } from '../helpers/openmetrics.ts'
import { decodeFamilies, labelsOf } from '../helpers/protobuf-metrics.ts'
import { Received, VirtualClock, playSteps, rawCall, startHeldUpstream } from '../helpers/virtual-time.ts'
import type { HeldUpstream } from '../helpers/virtual-time.ts'
import { parseTraceparent, sampleKeyOf, TraceIdSource, traceparentOf } from '../../src/record/trace-context.ts'
import { tracesConfig, tracesEndpoint } from '../../src/metrics/otel/config.ts'
import { requestIdExemplar } from '../../src/metrics/prometheus/histogram.ts'
import { sampledAtStart } from '../../src/timing/trace-sampling.ts'
import { validateConfig } from '../../src/config/load-config.ts'
import pino from 'pino'
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base'
import { OtelTraces } from '../../src/metrics/otel/traces.ts'
import { TraceThread } from '../../src/metrics/otel/trace-thread.ts'
import type { SpanDescription } from '../../src/metrics/otel/span-out.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { RecordPolicy } from '../../src/record/observations.ts'

const OM_ACCEPT = 'application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5'
const PB_ACCEPT = 'application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,text/plain;version=0.0.4;q=0.5'

const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736'
const CALLER_SPAN = '00f067aa0ba902b7'
const CALLER_STATE = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE'

/** A recorded stream split into its SSE events (each with its blank line): one upstream write each. */
const events = (path: string): string[] =>
  fixture(path)
    .toString('utf8')
    .split(/(?<=\n\n)/)
const NORMAL = 'openai/chat-text-role-first-usage-chunk.sse'
const ERROR = 'openai-compatible/groq-event-error-midstream.sse'

/** Upstream write times (ms from the request): event i at 50 + 10 i, the end with the last; `stallAt`: that event and the rest 1.5 s later. */
function timesOf(count: number, stallAt?: number): number[] {
  const times = Array.from({ length: count }, (_, i) => 50 + 10 * i + (stallAt !== undefined && i >= stallAt ? 1500 : 0))
  return [...times, times[times.length - 1]]
}

interface Setup {
  readonly proxy: RunningProxy
  readonly receiver: OtlpReceiver
  readonly upstream: HeldUpstream
  readonly clock: VirtualClock
  /** The headers each upstream request arrived with. */
  readonly seen: IncomingHttpHeaders[]
}

async function setup(t: Test, traces: Record<string, unknown>): Promise<Setup> {
  const receiver = await startOtlpReceiver()
  t.teardown(() => receiver.close())
  const seen: IncomingHttpHeaders[] = []
  const upstream = await startHeldUpstream((req, res) => {
    seen.push(req.headers)
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    for (const e of events(req.headers['x-fixture'] as string)) res.write(e)
    res.end()
  })
  t.teardown(() => upstream.close())
  const clock = new VirtualClock(1000)
  const proxy = await startProxy(
    {
      routes: [{ prefix: '/openai', upstream: upstream.url, provider: 'openai' }],
      metrics: { exemplars: true, stall_seconds: 1 },
      otel: { traces: { endpoint: receiver.url, ...traces } },
    },
    { now: clock.now },
  )
  t.teardown(() => proxy.close())
  return { proxy, receiver, upstream, clock, seen }
}

/** Replays one recorded stream through the proxy on virtual time; resolves when it is recorded. */
async function replay(s: Setup, id: string, path: string, headers: Record<string, string> = {}, stallAt?: number): Promise<void> {
  const received = new Received()
  const logged = s.proxy.logs.filter((l) => l.msg === 'request').length
  const call = rawCall(received, `${s.proxy.url}/openai/v1/chat/completions`, {
    headers: { 'content-type': 'application/json', 'x-request-id': id, 'x-fixture': path, ...headers },
    body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] }),
  })
  await playSteps(s.clock, s.upstream, received, { times: timesOf(events(path).length, stallAt) })
  await call.done
  await s.proxy.waitForRequests(logged + 1)
  // The next request starts later on the virtual clock.
  s.clock.set(s.clock.now() + 1000)
}

const line = (s: Setup, id: string): Record<string, unknown> => {
  const l = s.proxy.logs.find((x) => x.msg === 'request' && x.request_id === id)
  if (l === undefined) throw new Error(`no log line of ${id}`)
  return l
}
/** The label sets of every exemplar of an OpenMetrics scrape. */
async function scrapeExemplars(s: Setup): Promise<Readonly<Record<string, string>>[]> {
  const om = await (await fetch(`${s.proxy.adminUrl}/metrics`, { headers: { accept: OM_ACCEPT } })).text()
  return parseOpenMetrics(om).flatMap((f) => f.samples.flatMap((x) => (x.exemplar === undefined ? [] : [x.exemplar.labels])))
}
const spanOf = (s: Setup, id: string): ReceivedSpan | undefined => s.receiver.spans.find((x) => x.attributes['tokentap.request_id'] === id)
const ns = (span: ReceivedSpan, at: bigint): number => Number(at - span.startTimeUnixNano) / 1e9
const close = (t: Test, got: unknown, want: number, msg: string): void => void t.ok(typeof got === 'number' && Math.abs(got - want) < 1e-6, `${msg}: ${got} ≈ ${want}`)

t.test('replayed recorded streams: spans, attributes, events, parent links and sampling decisions (ratio 0)', async (t) => {
  const s = await setup(t, { sample: { ratio: 0 } })
  await replay(s, 'plain', NORMAL)
  await replay(s, 'unsampled-caller', NORMAL, { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-00` })
  await replay(s, 'invalid-caller', NORMAL, { traceparent: `ff-${CALLER_TRACE}-${CALLER_SPAN}-01` })
  await replay(s, 'stalled', NORMAL, {}, 5)
  await replay(s, 'failed', ERROR)
  // Before the last request: the latest fast ok request's exemplar (E2E bucket) is one not traced.
  const before = await scrapeExemplars(s)
  t.ok(
    before.some((e) => e.request_id === 'invalid-caller' && e.trace_id === undefined && e.span_id === undefined),
    'a request not traced has exemplars without trace ids',
  )
  await replay(s, 'sampled-caller', NORMAL, { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, tracestate: CALLER_STATE })
  await s.proxy.app.tokentap.otelTraces?.flush()

  t.same(
    s.receiver.spans.map((x) => x.attributes['tokentap.request_id']).sort(),
    ['failed', 'sampled-caller', 'stalled'],
    'kept: the stall, the error and the caller-sampled request; the rest cost no export',
  )
  t.equal(s.seen[5].traceparent, `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, 'the caller’s traceparent goes upstream unchanged by default')
  t.equal(s.seen[5].tracestate, CALLER_STATE)

  const child = spanOf(s, 'sampled-caller') as ReceivedSpan
  const l = line(s, 'sampled-caller')
  t.equal(child.traceId, CALLER_TRACE, 'a child in the caller’s trace')
  t.equal(child.parentSpanId, CALLER_SPAN, 'of the caller’s span')
  t.equal(child.traceState, CALLER_STATE, 'with its tracestate')
  t.equal(child.name, 'chat gpt-4o-mini', '{operation} {model}')
  t.equal(child.kind, 3, 'a CLIENT span')
  t.equal(child.scope, 'tokentap')
  t.equal(child.resource['service.name'], 'tokentap')
  t.equal(child.status.code, 0, 'status unset when ok')
  const a = child.attributes
  t.match(a, {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': 'openai',
    'gen_ai.request.model': 'gpt-4o-mini',
    'gen_ai.response.model': 'gpt-4o-mini-2024-07-18',
    'gen_ai.request.stream': true,
    'gen_ai.usage.input_tokens': l.input_tokens,
    'gen_ai.usage.output_tokens': l.output_tokens,
    'server.address': '127.0.0.1',
    'server.port': Number(new URL(s.upstream.url).port),
    'http.request.method': 'POST',
    'http.response.status_code': 200,
    'tokentap.request_id': 'sampled-caller',
    'tokentap.route': '/openai',
    'tokentap.outcome': 'ok',
    'tokentap.output_tokens.source': 'usage',
    'tokentap.stalls': 0,
    'tokentap.chunks': l.chunks,
  })
  t.notOk('error.type' in a, 'no error.type when ok')
  t.notOk('tokentap.error_type' in a, 'no fault domain when ok')
  close(t, a['gen_ai.response.time_to_first_chunk'], (l.ttft_ms as number) / 1000, 'TTFT as the semconv attribute')
  close(t, a['tokentap.ttft'], (l.ttft_ms as number) / 1000, 'TTFT')
  close(t, a['tokentap.tpot'], (l.tpot_ms as number) / 1000, 'TPOT')
  close(t, a['tokentap.itl.p50'], (l.itl_p50_ms as number) / 1000, 'ITL p50')
  close(t, a['tokentap.max_gap'], (l.max_gap_ms as number) / 1000, 'max gap')
  close(t, a['tokentap.time_to_response_headers'], 0.05, 'response headers at 50 ms')
  t.equal(a['tokentap.client_write_wait'], 0, 'the client took every write')
  close(t, ns(child, child.endTimeUnixNano), (l.e2e_ms as number) / 1000, 'the span lasts E2E')
  t.same(
    child.events.map((e) => e.name),
    ['tokentap.first_token', 'tokentap.end'],
    'first token and end, no stall',
  )
  close(t, ns(child, child.events[0].timeUnixNano), (l.ttft_ms as number) / 1000, 'the first token event at TTFT')
  t.equal(child.events[1].timeUnixNano, child.endTimeUnixNano, 'the end event at the span’s end')
  const wall = BigInt(Date.now()) * 1_000_000n
  t.ok(child.endTimeUnixNano <= wall && child.endTimeUnixNano > wall - 60_000_000_000n, 'placed on the wall clock: ended within the last minute')

  const stalled = spanOf(s, 'stalled') as ReceivedSpan
  t.equal(stalled.parentSpanId, '', 'no caller: a root span')
  t.not(stalled.traceId, CALLER_TRACE)
  t.equal(stalled.attributes['tokentap.stalls'], 1)
  const stall = stalled.events.filter((e) => e.name === 'tokentap.stall')
  t.equal(stall.length, 1, 'one stall event for the one gap over stall_seconds')
  close(t, stall[0].attributes['tokentap.gap'], 1.51, 'the gap it closed')
  close(t, ns(stalled, stall[0].timeUnixNano), (timesOf(events(NORMAL).length, 5)[5] as number) / 1000, 'at the chunk that ended it')
  close(t, stalled.attributes['tokentap.max_gap'], 1.51, 'max gap')

  const failed = spanOf(s, 'failed') as ReceivedSpan
  t.equal(failed.name, 'chat gpt-4o-mini')
  t.equal(failed.status.code, 2, 'status error')
  t.equal(failed.attributes['error.type'], 'provider_error')
  t.equal(failed.attributes['tokentap.provider_error'], 'tool_use_failed')
  t.equal(failed.attributes['tokentap.error_type'], 'stream_error', 'the fault domain, as on llm_requests_total')
  t.equal(failed.attributes['tokentap.outcome'], 'error')
  t.equal(failed.attributes['gen_ai.response.model'], 'openai/gpt-oss-120b')

  t.equal(line(s, 'sampled-caller').trace_id, CALLER_TRACE, 'the log line names the trace')
  t.equal(line(s, 'plain').trace_id, undefined, 'and only of a kept request')

  // Exemplars: the latest request of each bucket; the caller-sampled one came last among the fast ok ones.
  const exemplars = await scrapeExemplars(s)
  const traced = exemplars.filter((e) => e.trace_id !== undefined)
  t.ok(
    traced.some((e) => e.request_id === 'sampled-caller' && e.trace_id === child.traceId && e.span_id === child.spanId),
    'an OpenMetrics exemplar carries the exported span’s trace_id and span_id beside request_id',
  )
  const exported = new Set(s.receiver.spans.map((x) => `${x.traceId}/${x.spanId}`))
  t.ok(
    traced.every((e) => exported.has(`${e.trace_id}/${e.span_id}`)),
    'every exemplar trace is an exported one',
  )
  t.ok(
    exemplars.filter((e) => e.trace_id === undefined).every((e) => !['sampled-caller', 'stalled', 'failed'].includes(e.request_id)),
    'a traced request’s exemplars all carry its trace',
  )
  const pb = Buffer.from(await (await fetch(`${s.proxy.adminUrl}/metrics`, { headers: { accept: PB_ACCEPT } })).arrayBuffer())
  const pbExemplars = decodeFamilies(pb).flatMap((f) =>
    f.metric.flatMap((m) => [...(m.histogram?.bucket.flatMap((b) => (b.exemplar === undefined ? [] : [b.exemplar])) ?? []), ...(m.histogram?.exemplars ?? [])]),
  )
  t.ok(
    pbExemplars.some((e) => {
      const l = labelsOf(e)
      return l.request_id === 'sampled-caller' && l.trace_id === child.traceId && l.span_id === child.spanId
    }),
    'so does a protobuf exemplar',
  )
})

t.test('with propagate, the upstream request names tokentap’s span; ratio 1 keeps every trace', async (t) => {
  const s = await setup(t, { sample: { ratio: 1 }, propagate: true })
  await replay(s, 'child', NORMAL, { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, tracestate: CALLER_STATE })
  await replay(s, 'root', NORMAL)
  await replay(s, 'unsampled', NORMAL, { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-00` })
  await s.proxy.app.tokentap.otelTraces?.flush()
  const child = spanOf(s, 'child') as ReceivedSpan
  const root = spanOf(s, 'root') as ReceivedSpan
  t.equal(s.seen[0].traceparent, `00-${CALLER_TRACE}-${child.spanId}-01`, 'the caller’s trace, tokentap’s span as the parent')
  t.equal(s.seen[0].tracestate, CALLER_STATE, 'tracestate unchanged')
  t.equal(s.seen[1].traceparent, `00-${root.traceId}-${root.spanId}-01`, 'a request without a caller starts the trace upstream (sampled by the ratio)')
  t.equal(spanOf(s, 'unsampled'), undefined, 'the caller’s unsampled flag wins over the ratio')
  t.match(s.seen[2].traceparent, new RegExp(`^00-${CALLER_TRACE}-[0-9a-f]{16}-00$`), 'and goes upstream unsampled')
  t.equal(s.receiver.spans.length, 2)
})

t.test('closing the proxy exports every span still waiting in either thread, and the export’s thread stops', async (t) => {
  const s = await setup(t, { sample: { ratio: 1 } })
  await replay(s, 'first', NORMAL)
  await replay(s, 'second', NORMAL)
  const traces = s.proxy.app.tokentap.otelTraces
  // No flush: the two spans are in the main thread's batch (under 64, within its second) or the worker's batch processor.
  await s.proxy.close()
  t.same(s.receiver.spans.map((x) => x.attributes['tokentap.request_id']).sort(), ['first', 'second'])
  await traces?.flush()
  await traces?.shutdown()
  t.equal(s.receiver.spans.length, 2, 'after the shutdown, a flush or a second shutdown has nothing to wait for')
})

t.test('an export thread that cannot start costs one error line and no span, and never holds a flush or the shutdown', async (t) => {
  const lines: Record<string, unknown>[] = []
  const logger = pino({ level: 'debug', base: undefined }, { write: (l: string) => void lines.push(JSON.parse(l)) })
  // The OTLP exporter refuses a URL it cannot parse when the thread builds it.
  const thread = new TraceThread({ url: 'not a url', headers: undefined, timeoutMillis: undefined }, logger)
  const head = { name: 'chat m', traceId: CALLER_TRACE, spanId: CALLER_SPAN, parent: undefined, startMs: 1, endMs: 2, durationMs: 1 }
  const span: SpanDescription = (out) => {
    out.begin(head)
    out.end(0, undefined)
  }
  thread.write(span)
  await thread.flush()
  thread.write(span)
  await thread.flush()
  await thread.shutdown()
  t.same(
    lines.filter((l) => l.level === 50).map((l) => l.msg),
    ['the OTLP traces thread failed: spans are no longer exported'],
  )
})

t.test('the proxy’s thread loads no OpenTelemetry package for spans: the SDK, its serialiser and exporter load in the export’s thread', async (t) => {
  // In a fresh process: this one has the SDK loaded already (the in-memory exporter below).
  const script = `import { createRequire } from 'node:module'
await import(${JSON.stringify(pathToFileURL(distPath('src/metrics/otel/traces.js')).href)})
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((k) => k.includes('@opentelemetry'))
process.stdout.write(JSON.stringify(loaded))`
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })
  t.same(JSON.parse(out), [], 'no @opentelemetry module in the importing thread')
})

t.test('a caller’s traceparent is read by the W3C rules; anything invalid is ignored', async (t) => {
  const ok = parseTraceparent({ traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, tracestate: 'a=b' })
  t.same(ok, { traceId: CALLER_TRACE, spanId: CALLER_SPAN, sampled: true, traceState: 'a=b' })
  t.equal(parseTraceparent({ traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-02` })?.sampled, false, 'only bit 0 is the sampled flag')
  t.same(parseTraceparent({ traceparent: `cc-${CALLER_TRACE}-${CALLER_SPAN}-01-what-comes-later` })?.spanId, CALLER_SPAN, 'a later version: its first four fields')
  for (const bad of [
    `00-${CALLER_TRACE}-${CALLER_SPAN}-01-x`,
    `ff-${CALLER_TRACE}-${CALLER_SPAN}-01`,
    `00-${'0'.repeat(32)}-${CALLER_SPAN}-01`,
    `00-${CALLER_TRACE}-${'0'.repeat(16)}-01`,
    `00-${CALLER_TRACE.toUpperCase()}-${CALLER_SPAN}-01`,
    `00-${CALLER_TRACE}-${CALLER_SPAN}-01, 00-${CALLER_TRACE}-${CALLER_SPAN}-01`,
    `cc-${CALLER_TRACE}-${CALLER_SPAN}-01x`,
    '00-short-01',
  ]) {
    t.equal(parseTraceparent({ traceparent: bad }), undefined, `invalid: ${bad}`)
  }
  t.equal(parseTraceparent({}), undefined, 'none')
  t.equal(parseTraceparent({ traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, tracestate: 'x'.repeat(20_000) })?.traceState, undefined, 'a tracestate past any real one is dropped')

  const ids = new TraceIdSource()
  const starts = Array.from({ length: 1000 }, () => ids.start({}))
  t.ok(
    starts.every((x) => /^[0-9a-f]{32}$/.test(x.traceId) && /^[0-9a-f]{16}$/.test(x.spanId) && x.parent === undefined),
    'new trace ids and span ids, as lower-case hex, past one pool of random bytes',
  )
  t.equal(new Set(starts.map((x) => x.spanId)).size, 1000, 'span ids do not repeat')
  t.equal(traceparentOf(starts[0], true), `00-${starts[0].traceId}-${starts[0].spanId}-01`)
  const withParent = ids.start({ traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-00` })
  t.equal(withParent.traceId, CALLER_TRACE)
  t.equal(sampledAtStart(withParent, 1), false, 'parent-based: the caller’s flag, not the ratio')
  t.equal(sampledAtStart({ sampleKey: sampleKeyOf(`${'0'.repeat(19)}${'f'.repeat(13)}`), parent: undefined }, 0.999), false, 'the ratio on the trace id’s low bits')
  t.equal(sampledAtStart({ sampleKey: sampleKeyOf(`${'f'.repeat(19)}${'0'.repeat(13)}`), parent: undefined }, 0.001), true)
  t.ok(
    starts.every((x) => x.sampleKey === sampleKeyOf(x.traceId)),
    'a new trace’s sample key, taken from its random bytes, is its trace id’s last 13 hex digits over 2^52',
  )
  t.ok(starts.some((x) => x.sampleKey < 0.5) && starts.some((x) => x.sampleKey >= 0.5), 'spread over [0, 1)')
  t.equal(withParent.sampleKey, sampleKeyOf(CALLER_TRACE), 'a caller’s trace: the key of its trace id')
})

t.test('traces are off by default, and the standard variables can turn them off', async (t) => {
  const config = (otel: Record<string, unknown>) => validateConfig({ routes: [{ prefix: '/', upstream: 'http://127.0.0.1:1' }], otel }).otel
  t.equal(tracesConfig(config({}), {}), undefined, 'off without otel.traces')
  t.same(tracesConfig(config({ traces: {} }), {}), { sample: { ratio: 0.1, keep: ['error', 'stall', 'slo_miss', 'slow'], slow_seconds: 10 }, propagate: false }, 'the defaults')
  t.equal(tracesConfig(config({ traces: {} }), { OTEL_SDK_DISABLED: 'true' }), undefined)
  t.equal(tracesConfig(config({ traces: {} }), { OTEL_TRACES_EXPORTER: 'none' }), undefined)
  t.equal(tracesEndpoint(config({ traces: { endpoint: 'http://c:4318/v1/traces' } })), 'http://c:4318/v1/traces', 'a traces URL as given')
  t.equal(tracesEndpoint(config({ endpoint: 'http://c:4318/', traces: {} })), 'http://c:4318/v1/traces', 'otel.endpoint’s base with /v1/traces')
  t.equal(tracesEndpoint(config({ traces: {} })), undefined, 'else the exporter’s variables')
  t.throws(() => config({ traces: { sample: { keep: ['sometimes'] } } }), 'an unknown keep rule stops start-up')
})

t.test('an exemplar with a trace stays within the OpenMetrics label-set limit of 128 characters', async (t) => {
  const trace = { traceId: CALLER_TRACE, spanId: CALLER_SPAN }
  const labels = requestIdExemplar('r'.repeat(200), trace)
  const pairs = [...labels.matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1], m[2]])
  t.same(
    pairs.map(([k]) => k),
    ['request_id', 'trace_id', 'span_id'],
  )
  t.equal(
    pairs.reduce((n, [k, v]) => n + k.length + [...v].length, 0),
    128,
    'names and values: exactly the limit, the request id cut',
  )
  t.equal(requestIdExemplar('r'.repeat(200)).length, 'request_id=""'.length + 118, 'without a trace the id keeps 118 characters')
  // Characters are code points: 100 emoji are 200 UTF-16 units and fit; 130 are cut at 118, never inside one.
  t.equal(requestIdExemplar('😀'.repeat(100)), `request_id="${'😀'.repeat(100)}"`, 'an id of 100 characters in 200 UTF-16 units is whole')
  t.equal(requestIdExemplar('😀'.repeat(130)), `request_id="${'😀'.repeat(118)}"`, 'a longer one is cut at 118 characters')
})

t.test('a realtime session is a span under the caller’s, each response a span under it; an unsampled session exports nothing', async (t) => {
  const receiver = await startOtlpReceiver()
  t.teardown(() => receiver.close())
  const proxy = await startProxy({ routes: [simRoute()], otel: { traces: { endpoint: receiver.url, sample: { ratio: 0 } } } })
  t.teardown(() => proxy.close())
  const sessions = (): number => proxy.logs.filter((l) => l.msg === 'realtime session').length
  const plan = { ttft_ms: 1, first_tokens: 1, chunks: [[1, 1]], audio_ms_per_token: 20 }
  const callers: Record<string, string>[] = [{ traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, 'x-request-id': 'rt-sampled' }, { 'x-request-id': 'rt-plain' }]
  for (const headers of callers) {
    const c = tapedClient(`${proxy.url.replace('http', 'ws')}/sim/v1/realtime?model=gpt-realtime`, { headers })
    await c.opened
    await respond(c, plan, 1)
    await respond(c, plan, 2)
    const before = sessions()
    c.ws.close(1000)
    await c.closed
    await eventually('the session recorded', () => sessions() > before)
  }
  await proxy.app.tokentap.otelTraces?.flush()
  const session = receiver.spans.find((x) => x.name === 'realtime_session gpt-realtime')
  const responses = receiver.spans.filter((x) => x.name === 'realtime_inference gpt-realtime')
  t.equal(receiver.spans.length, 3, 'the sampled session and its two responses; the ratio-0 session none')
  if (session === undefined) throw new Error('no session span')
  t.equal(session.traceId, CALLER_TRACE)
  t.equal(session.parentSpanId, CALLER_SPAN, 'the session under the caller’s span')
  t.match(session.attributes, { 'gen_ai.live_session.id': 'rt-sampled', 'tokentap.responses': 2, 'tokentap.outcome': 'ok', 'http.response.status_code': 101, 'gen_ai.provider.name': 'openai' })
  t.same(
    responses.map((r) => [r.traceId, r.parentSpanId]),
    [
      [CALLER_TRACE, session.spanId],
      [CALLER_TRACE, session.spanId],
    ],
    'each response under the session',
  )
  t.not(responses[0].spanId, responses[1].spanId)
  t.match(responses[0].attributes, { 'gen_ai.operation.name': 'realtime_inference', 'gen_ai.request.model': 'gpt-realtime', 'gen_ai.live_session.id': 'rt-sampled', 'tokentap.outcome': 'ok' })
  t.ok(typeof responses[0].attributes['gen_ai.usage.output_tokens'] === 'number', 'usage from response.done')
  t.ok(
    responses.every((r) => r.startTimeUnixNano >= session.startTimeUnixNano && r.endTimeUnixNano <= session.endTimeUnixNano),
    'within the session',
  )
})

t.test('a failing trace collector costs one warning per outage and a line when it works again, never a request', async (t) => {
  const s = await setup(t, { sample: { ratio: 1 } })
  // 400: not retryable (a 503 would be retried with back-off first)
  s.receiver.status = 400
  await replay(s, 'during-outage-1', NORMAL)
  await s.proxy.app.tokentap.otelTraces?.flush()
  await replay(s, 'during-outage-2', NORMAL)
  await s.proxy.app.tokentap.otelTraces?.flush()
  s.receiver.status = 200
  await replay(s, 'after-outage', NORMAL)
  await s.proxy.app.tokentap.otelTraces?.flush()
  t.same(
    s.proxy.logs.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('OTLP traces export')).map((l) => l.msg),
    ['OTLP traces export failed', 'OTLP traces export works again'],
  )
  t.same(
    s.receiver.spans.map((x) => x.attributes['tokentap.request_id']),
    ['after-outage'],
    'the spans of the outage are lost, the requests were not',
  )
  t.equal(line(s, 'during-outage-2').outcome, 'ok')
})

t.test('what a span carries when the provider reports more, and realtime failures kept by the error rule', async (t) => {
  const exporter = new InMemorySpanExporter()
  const config = validateConfig({ routes: [{ prefix: '/', upstream: 'http://127.0.0.1:1' }], otel: { traces: { sample: { ratio: 0 } } } }).otel
  const start = new TraceIdSource().start({})
  const policy = new RecordPolicy({ maxModelsPerRoute: 10, lengthBandLabel: false, genAi: true, tenant: true, traces: { ratio: 0, keep: ['error', 'slo_miss'], slowSeconds: 10 } })
  const route = { label: '/r', prefix: '/r', provider: 'openai', inFlight: 0, slo: { ttft_seconds: 0.001 } }
  const log = new ChunkLog()
  log.add(9_500, 2, MarkKind.text, false)
  const m = measure({
    tReq: 9_000,
    tEnd: 9_600,
    tHeaders: 9_100,
    statusCode: 200,
    failure: undefined,
    clientGone: false,
    chunks: log,
    summary: { usage: { input: 10, output: 5, reasoning: 3, cacheRead: 4, cacheWrite: 1 }, reported: { queue: 0.1, prompt: 0.2 } },
    slo: route.slo,
    stallSeconds: 1,
  })
  const who = {
    id: 'x',
    route,
    provider: 'gemini',
    tenant: 'team-a',
    method: 'POST',
    path: '/v1beta/models/m:streamGenerateContent',
    model: 'm',
    responseModel: 'm-001',
    usageInjected: false,
    concurrency: 1,
    bytesIn: 1,
    bytesOut: 1,
    tReq: 9_000,
    overhead: { request: undefined, firstChunk: undefined, chunk: undefined },
    extra: undefined,
    failureDetail: undefined,
    trace: start,
  }
  const o = policy.observe(who, m)
  t.same(o.trace, { traceId: start.traceId, spanId: start.spanId, parent: undefined, sampleKey: start.sampleKey }, 'kept by slo_miss at ratio 0')
  // Spans without the OTel metrics: only a kept request's operation is worked out (its span's name), no bounded response model.
  const spansOnly = new RecordPolicy({ maxModelsPerRoute: 10, lengthBandLabel: false, genAi: false, traces: { ratio: 0, keep: ['slo_miss'], slowSeconds: 10 } })
  const kept = spansOnly.observe(who, m)
  t.equal(kept.operation, 'generate_content', 'a kept span is named by its operation')
  t.equal(kept.responseModel, undefined)
  const dropped = spansOnly.observe(
    { ...who, route: { ...route, slo: undefined } },
    measure({ tReq: 9_000, tEnd: 9_600, tHeaders: 9_100, statusCode: 200, failure: undefined, clientGone: false, chunks: log, summary: {}, stallSeconds: 1 }),
  )
  t.same([dropped.trace, dropped.operation, dropped.responseModel], [undefined, undefined, undefined], 'a sampled-out request works out neither')
  // The SDK's in-memory exporter in place of OTLP: the spans as the processor hands them over.
  const mem = new OtelTraces({
    config,
    traces: config.traces as NonNullable<typeof config.traces>,
    logger: pino({ level: 'silent' }),
    stallSeconds: 1,
    now: () => 10_000,
    wallMs: () => 1_000_000,
    exporter,
  })
  t.teardown(() => mem.shutdown())
  mem.record(o)
  const rt = { seq: 1, id: 'rt', route, provider: 'openai', tenant: undefined, model: 'gpt-realtime', path: '/v1/realtime', tReq: 9_000, trace: start }
  const timing = { ttft: undefined, ttfa: undefined, itl: [], underrun: undefined, audioSeconds: 0, textDeltas: 0, streamedTokens: 0, audioDeltas: 0 }
  mem.realtime.response?.(rt, { provider: 'openai', model: 'gpt-realtime', route: '/r' }, { id: undefined, start: undefined, end: 9_500, outcome: 'ok', detail: undefined, timing, usage: undefined })
  mem.realtime.response?.(
    rt,
    { provider: 'openai', model: 'gpt-realtime', route: '/r' },
    { id: 'resp_1', start: 9_200, end: 9_500, outcome: 'error', detail: 'server_error', timing, usage: undefined },
  )
  mem.realtime.session?.(
    { ...rt, seq: 2 },
    { provider: 'openai', model: 'gpt-realtime', route: '/r' },
    sessionSummary({ outcome: 'error', duration: 1, close: { from: 'upstream', code: 1011, reason: '' }, endedBy: 'upstream', responses: 0 }),
  )
  mem.realtime.session?.({ ...rt, seq: 3 }, { provider: 'openai', model: 'gpt-realtime', route: '/r' }, sessionSummary({ duration: 1, close: undefined, endedBy: undefined, responses: 0 }))
  await mem.flush()
  const spans = exporter.getFinishedSpans()
  t.same(
    spans.map((s) => s.name),
    ['generate_content m', 'realtime_inference gpt-realtime', 'realtime_session gpt-realtime'],
    'the request; of the unsampled session only the failed response and the failed session',
  )
  t.match(spans[0].attributes, {
    'gen_ai.provider.name': 'gcp.gemini',
    'gen_ai.usage.cache_read.input_tokens': 4,
    'gen_ai.usage.cache_creation.input_tokens': 1,
    'gen_ai.usage.reasoning.output_tokens': 3,
    'tokentap.tenant': 'team-a',
    'tokentap.slo': 'missed',
    'tokentap.upstream_reported.queue': 0.1,
    'tokentap.upstream_reported.prompt': 0.2,
  })
  t.match(spans[1].attributes, { 'error.type': 'server_error', 'tokentap.error_type': 'upstream_error', 'gen_ai.response.id': 'resp_1' })
  t.equal(spans[1].parentSpanContext?.spanId, start.spanId, 'under its session')
  t.equal(spans[1].status.code, 2)
  t.match(spans[2].attributes, { 'error.type': '1011', 'tokentap.close_code': 1011, 'tokentap.ended_by': 'upstream' })
  t.same(spans[0].startTime, [999, 0], 'started 1 s before the one reading of both clocks (monotonic 10,000 ms = epoch 1,000 s)')
})
