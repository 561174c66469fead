import t from 'tap'
import { sessionSummary } from '../helpers/realtime.ts'
import { writtenAsTheSdk } from '../helpers/span-bytes.ts'
import { describeRealtimeResponse, describeRealtimeSession } from '../../src/metrics/otel/realtime-span.ts'
import type { RealtimeSpanContext } from '../../src/metrics/otel/realtime-span.ts'
import { recordOf } from '../../src/metrics/otel/span-out.ts'
import type { SpanDescription } from '../../src/metrics/otel/span-out.ts'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import type { SessionIdentity, SessionSummary } from '../../src/realtime/session.ts'
import { TraceIdSource } from '../../src/record/trace-context.ts'

const CALLER = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
const CONTEXT: RealtimeSpanContext = { offsetMs: 1_765_000_000_000 - 9_000, server: { address: 'api.openai.com', port: 443 } }
const RESPONSE_SPAN = 'b7ad6b7169203331'

function session(headers: Record<string, string> = {}, over: Partial<SessionIdentity> = {}): SessionIdentity {
  const route = { label: '/rt', prefix: '/rt', provider: 'openai', inFlight: 0, slo: undefined }
  return {
    seq: 1,
    id: 'rt-1',
    route,
    provider: 'openai',
    tenant: undefined,
    model: 'gpt-realtime',
    path: '/v1/realtime',
    tReq: 9_000,
    trace: new TraceIdSource().start(headers),
    ...over,
  } as SessionIdentity
}

const TIMING = { ttft: 0.21, ttfa: 0.3, itl: [], underrun: 0.05, audioSeconds: 2.5, textDeltas: 7, streamedTokens: 9, audioDeltas: 12 }
const USAGE = { inputText: 12, inputAudio: 30, outputText: 9, outputAudio: 80 }

function response(over: Partial<FinishedResponse> = {}): FinishedResponse {
  return { id: 'resp_1', start: 9_200, end: 9_900, outcome: 'ok', detail: undefined, timing: TIMING, usage: USAGE, ...over } as FinishedResponse
}

function responseSpan(who: SessionIdentity, r: FinishedResponse, c = CONTEXT): SpanDescription {
  const start = who.trace
  if (start === undefined) throw new Error('no trace')
  return (out) => describeRealtimeResponse(who, start, RESPONSE_SPAN, r, c, out)
}

function sessionSpan(who: SessionIdentity, s: SessionSummary, c = CONTEXT): SpanDescription {
  const start = who.trace
  if (start === undefined) throw new Error('no trace')
  return (out) => describeRealtimeSession(who, start, s, c, out)
}

function cases(): [string, SpanDescription][] {
  const caller = session({ traceparent: CALLER })
  return [
    ['a response with usage, audio and its first token', responseSpan(session(), response())],
    [
      'a failed response with no timing, no usage, no id and the server unknown',
      responseSpan(
        session({}, { model: undefined }),
        response({ id: undefined, start: undefined, outcome: 'error', detail: 'server_error', usage: undefined, timing: { ...TIMING, ttft: undefined, ttfa: undefined, underrun: undefined } }),
        {
          ...CONTEXT,
          server: undefined,
        },
      ),
    ],
    ['a session under a caller’s span, with a tenant', sessionSpan(session({ traceparent: CALLER }, { tenant: 'team-a' }), sessionSummary())],
    ['a response under a session with a caller’s span', responseSpan(caller, response())],
    ['a session the upstream ended with an error close', sessionSpan(session(), sessionSummary({ outcome: 'error', close: { from: 'upstream', code: 1011, reason: '' }, endedBy: 'upstream' }))],
    [
      'a session the proxy failed',
      sessionSpan(session(), sessionSummary({ outcome: 'error', statusCode: 502, failure: 'TOKENTAP_ERR_UPSTREAM_CONNECT', close: undefined, endedBy: 'proxy', responses: 0 })),
    ],
    ['a session under a caller’s span with its tracestate', sessionSpan(session({ traceparent: CALLER, tracestate: 'rojo=00f067aa0ba902b7' }), sessionSummary())],
  ]
}

t.test('a realtime span written from its figures is the SDK’s bytes for the record of the same description', async (t) => {
  for (const [what, describe] of cases()) await writtenAsTheSdk(t, what, [describe])
  await writtenAsTheSdk(
    t,
    'all of them in one batch',
    cases().map(([, describe]) => describe),
  )
})

t.test('a response’s span is its session’s child and says what the response did', async (t) => {
  const who = session()
  const r = recordOf(responseSpan(who, response()))
  t.equal(r.name, 'realtime_inference gpt-realtime')
  t.same(r.parent, { traceId: who.trace?.traceId, spanId: who.trace?.spanId, sampled: true, traceState: undefined, remote: false })
  t.equal(r.spanId, RESPONSE_SPAN)
  t.same([r.startMs - CONTEXT.offsetMs, r.endMs - CONTEXT.offsetMs, r.durationMs], [9_200, 9_900, 700])
  t.same(
    r.events.map((e) => [e.name, e.timeMs - CONTEXT.offsetMs, e.attributes]),
    [
      ['tokentap.first_token', 9_410, {}],
      ['tokentap.end', 9_900, { 'tokentap.outcome': 'ok' }],
    ],
  )
  t.same(r.attributes, {
    'gen_ai.operation.name': 'realtime_inference',
    'gen_ai.provider.name': 'openai',
    'gen_ai.live_session.id': 'rt-1',
    'tokentap.request_id': 'rt-1',
    'tokentap.route': '/rt',
    'tokentap.outcome': 'ok',
    'gen_ai.request.model': 'gpt-realtime',
    'gen_ai.response.id': 'resp_1',
    'gen_ai.usage.input_tokens': 42,
    'gen_ai.usage.output_tokens': 89,
    'gen_ai.usage.text.input_tokens': 12,
    'gen_ai.usage.audio.input_tokens': 30,
    'gen_ai.usage.text.output_tokens': 9,
    'gen_ai.usage.audio.output_tokens': 80,
    'tokentap.ttft': 0.21,
    'tokentap.time_to_first_audio': 0.3,
    'tokentap.audio_underrun': 0.05,
    'tokentap.audio_seconds': 2.5,
    'tokentap.text_deltas': 7,
    'tokentap.audio_deltas': 12,
    'server.address': 'api.openai.com',
    'server.port': 443,
  })
  t.same([r.status, r.statusMessage], [0, undefined])
  const failed = recordOf(responseSpan(who, response({ start: undefined, outcome: 'error', detail: 'server_error' })))
  t.same([failed.status, failed.statusMessage, failed.attributes['error.type']], [2, 'server_error', 'server_error'], 'a failure: an error status with the provider’s detail')
  t.equal(failed.durationMs, 0, 'a response with no start begins at its end')
})

t.test('a session’s span says how it ended, and its error type is its status message', async (t) => {
  const who = session({ traceparent: CALLER })
  const s = recordOf(sessionSpan(who, sessionSummary({ outcome: 'error', close: { from: 'upstream', code: 1011, reason: '' }, endedBy: 'upstream' })))
  t.equal(s.name, 'realtime_session gpt-realtime')
  t.match(s.parent, { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', remote: true })
  t.same([s.startMs - CONTEXT.offsetMs, s.durationMs], [9_000, 2_000])
  t.match(s.attributes, { 'http.response.status_code': 101, 'tokentap.close_code': 1011, 'tokentap.ended_by': 'upstream', 'tokentap.responses': 2, 'error.type': '1011' })
  t.same([s.status, s.statusMessage], [2, '1011'])
  const refused = recordOf(sessionSpan(who, sessionSummary({ outcome: 'error', statusCode: 403, close: undefined, endedBy: undefined })))
  t.same([refused.attributes['error.type'], refused.statusMessage], ['403', '403'], 'no failure and no close: the status code')
  const ok = recordOf(sessionSpan(who, sessionSummary()))
  t.same([ok.status, ok.statusMessage, ok.attributes['error.type']], [0, undefined, undefined])
  t.same(ok.events, [], 'a session has no events')
})
