import t from 'tap'
import { writtenAsTheSdk } from '../helpers/span-bytes.ts'
import { describeRequestSpan, MAX_STALL_EVENTS } from '../../src/metrics/otel/request-span.ts'
import type { RequestSpanContext } from '../../src/metrics/otel/request-span.ts'
import { recordOf } from '../../src/metrics/otel/span-out.ts'
import type { SpanDescription } from '../../src/metrics/otel/span-out.ts'
import { RecordPolicy } from '../../src/record/observations.ts'
import type { RequestFacts } from '../../src/record/observations.ts'
import { TraceIdSource } from '../../src/record/trace-context.ts'
import type { FailureCode } from '../../src/errors.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import type { StreamSummary } from '../../src/parsers/types.ts'

const CALLER = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'

/** A kept request's Observations: a stream with chunks at `at` (ms after 9,000) and the rest as given. */
function observed(
  over: {
    at?: readonly number[]
    summary?: StreamSummary
    statusCode?: number
    failure?: FailureCode
    headers?: Record<string, string>
    path?: string
    model?: string | undefined
    tenant?: string
    slo?: boolean
  } = {},
) {
  const policy = new RecordPolicy({
    maxModelsPerRoute: 10,
    lengthBandLabel: false,
    genAi: false,
    tenant: true,
    traces: { ratio: 1, keep: [], slowSeconds: 10 },
  })
  const slo = over.slo === true ? { ttft_seconds: 0.001 } : undefined
  const route = { label: '/r', prefix: '/r', provider: 'openai', inFlight: 0, slo }
  const log = new ChunkLog()
  const at = over.at ?? [100, 150, 230]
  for (const [i, ms] of at.entries()) log.add(9_000 + ms, i + 1, MarkKind.text, false)
  const end = 9_000 + (at.at(-1) ?? 0) + 20
  const m = measure({
    tReq: 9_000,
    tEnd: end,
    tHeaders: 9_050,
    statusCode: over.statusCode ?? 200,
    failure: over.failure,
    clientGone: false,
    chunks: log,
    summary: over.summary ?? {},
    slo,
    stallSeconds: 1,
  })
  const who: RequestFacts = {
    id: 'req-1',
    route,
    provider: 'openai',
    tenant: over.tenant,
    method: 'POST',
    path: over.path ?? '/v1/chat/completions',
    model: 'model' in over ? over.model : 'gpt-4o-mini',
    responseModel: 'model' in over ? over.model : 'gpt-4o-mini-2024-07-18',
    usageInjected: false,
    concurrency: 1,
    bytesIn: 1,
    bytesOut: 1,
    tReq: 9_000,
    overhead: { request: undefined, firstChunk: undefined, chunk: undefined },
    extra: undefined,
    failureDetail: undefined,
    trace: new TraceIdSource().start(over.headers ?? {}),
  }
  const o = policy.observe(who, m)
  if (o.trace === undefined || who.trace === undefined) throw new Error('not kept')
  return { o, start: who.trace }
}

const CONTEXT: RequestSpanContext = { offsetMs: 1_765_000_000_000 - 9_000, stallMs: 1000, server: { address: 'api.openai.com', port: 443 } }

function cases(): [string, ReturnType<typeof observed>, RequestSpanContext][] {
  const stalled = Array.from({ length: MAX_STALL_EVENTS + 20 }, (_, i) => 100 + i * 1_500)
  return [
    ['a plain streamed request', observed(), CONTEXT],
    [
      'usage with its cache and reasoning parts, reported phases, a tenant and an SLO miss',
      observed({
        summary: { usage: { input: 10, output: 5, reasoning: 3, cacheRead: 4, cacheWrite: 1 }, reported: { queue: 0.1, prompt: 0.25 } },
        tenant: 'team-a',
        slo: true,
      }),
      CONTEXT,
    ],
    ['stalls past the events’ bound', observed({ at: stalled }), CONTEXT],
    [
      'an upstream failure with a provider error, no model, the server unknown',
      observed({ at: [], statusCode: 503, summary: { error: 'overloaded_error' }, model: undefined }),
      { ...CONTEXT, server: undefined },
    ],
    ['a proxy failure before any byte', observed({ at: [], statusCode: 502, failure: 'TOKENTAP_ERR_UPSTREAM_CONNECT' }), CONTEXT],
    ['a caller’s span', observed({ headers: { traceparent: CALLER } }), CONTEXT],
    ['a caller’s span with its tracestate', observed({ headers: { traceparent: CALLER, tracestate: 'rojo=00f067aa0ba902b7' } }), CONTEXT],
  ]
}

t.test('a request’s span written from its figures is the SDK’s bytes for the record of the same description', async (t) => {
  for (const [what, { o, start }, context] of cases()) await writtenAsTheSdk(t, what, [(out) => describeRequestSpan(o, start, context, out)])
})

t.test('a batch of request spans, one with a caller’s tracestate among them, is the SDK’s bytes for their records', async (t) => {
  const all = cases().map(
    ([, { o, start }, context]): SpanDescription =>
      (out) =>
        describeRequestSpan(o, start, context, out),
  )
  await writtenAsTheSdk(t, 'the batch', all)
})

t.test('the description says what the request did', async (t) => {
  const [, plain] = cases()[0]
  const r = recordOf((out) => describeRequestSpan(plain.o, plain.start, CONTEXT, out))
  t.equal(r.name, 'chat gpt-4o-mini')
  t.same(
    r.events.map((e) => [e.name, e.timeMs - CONTEXT.offsetMs]),
    [
      ['tokentap.first_token', 9_100],
      ['tokentap.end', 9_250],
    ],
  )
  t.match(r.attributes, {
    'gen_ai.provider.name': 'openai',
    'gen_ai.operation.name': 'chat',
    'gen_ai.request.stream': true,
    'server.address': 'api.openai.com',
    'server.port': 443,
    'tokentap.chunks': 3,
    'tokentap.stalls': 0,
  })
  const [, stalled] = cases()[2]
  const s = recordOf((out) => describeRequestSpan(stalled.o, stalled.start, CONTEXT, out))
  t.equal(s.events.filter((e) => e.name === 'tokentap.stall').length, MAX_STALL_EVENTS, 'one event per stall, up to the bound')
  t.equal(s.attributes['tokentap.stalls'], MAX_STALL_EVENTS + 19, 'all of them counted')
  t.match(s.events[1], { name: 'tokentap.stall', attributes: { 'tokentap.gap': 1.5, 'tokentap.chunk': 1 } })
  const [, failed] = cases()[3]
  const f = recordOf((out) => describeRequestSpan(failed.o, failed.start, CONTEXT, out))
  t.same([f.status, f.statusMessage], [2, f.attributes['error.type']], 'an error status with its error type')
  t.equal(f.name, 'chat unknown')
})
