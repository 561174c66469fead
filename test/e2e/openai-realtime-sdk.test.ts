import { connect as tlsConnect } from 'node:tls'
import type { ConnectionOptions } from 'node:tls'
import t from 'tap'
import type { Test } from 'tap'
import OpenAI from 'openai'
import { OpenAIRealtimeWS } from 'openai/realtime/ws'
import { OpenAIRealtimeWebSocket } from 'openai/realtime/websocket'
import { Agent, WebSocket as UndiciWebSocket } from 'undici'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import type { SessionSummary } from '../../src/realtime/session.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { Tape, eventually, startWsUpstream } from '../helpers/realtime.ts'
import type { UpstreamConnection, WsUpstream } from '../helpers/realtime.ts'
import { makeTestCa } from '../helpers/test-ca.ts'
import { VirtualClock, near } from '../helpers/virtual-time.ts'

/**
 * The official OpenAI SDK's realtime clients through tokentap, against an upstream that sends a
 * known schedule on virtual time: the proxy's clock is the test's, set before each message is
 * sent, and moved only once the other end has it. Every figure is then exact.
 *
 * The SDK always connects with wss:// (it rewrites the base URL's scheme), so tokentap listens
 * with TLS here (`server.tls`).
 */

const ca = makeTestCa()
t.teardown(() => ca.remove())

/** 9,600 bytes of PCM16 at 24 kHz: 200 ms of audio. */
const AUDIO_200MS = Buffer.alloc(9600).toString('base64')
const USAGE = { total_tokens: 80, input_tokens: 30, output_tokens: 50, input_token_details: { text_tokens: 10, audio_tokens: 20 }, output_token_details: { text_tokens: 3, audio_tokens: 47 } }

/** The schedule, ms on the virtual clock: what the upstream sends when; the client's response.create at 1000. */
const SCHEDULE: [number, Record<string, unknown>][] = [
  [1050, { type: 'response.created', response: { id: 'resp_1', object: 'realtime.response', status: 'in_progress', output: [] } }],
  [1300, { type: 'response.output_audio.delta', response_id: 'resp_1', item_id: 'item_1', output_index: 0, content_index: 0, delta: AUDIO_200MS }],
  [1310, { type: 'response.output_audio_transcript.delta', response_id: 'resp_1', item_id: 'item_1', output_index: 0, content_index: 0, delta: ' the of' }],
  [1700, { type: 'response.output_audio.delta', response_id: 'resp_1', item_id: 'item_1', output_index: 0, content_index: 0, delta: AUDIO_200MS }],
  [1720, { type: 'response.output_audio_transcript.delta', response_id: 'resp_1', item_id: 'item_1', output_index: 0, content_index: 0, delta: ' and' }],
  [1800, { type: 'response.done', response: { id: 'resp_1', object: 'realtime.response', status: 'completed', output: [], usage: USAGE } }],
]

interface Rig {
  clock: VirtualClock
  proxy: RunningProxy
  upstream: WsUpstream
  sessions: SessionSummary[]
  responses: FinishedResponse[]
  baseURL: string
}

async function rig(t: Test): Promise<Rig> {
  const clock = new VirtualClock()
  const upstream = await startWsUpstream({ perMessageDeflate: false, handleProtocols: (p) => (p.has('realtime') ? 'realtime' : false) })
  t.teardown(() => upstream.close())
  const proxy = await startProxy(
    { server: { host: '127.0.0.1', port: 0, tls: { cert: ca.serverCert, key: ca.serverKey } }, routes: [{ prefix: '/openai', upstream: upstream.url, provider: 'openai' }] },
    { now: clock.now },
  )
  t.teardown(() => proxy.close())
  const sessions: SessionSummary[] = []
  const responses: FinishedResponse[] = []
  proxy.app.tokentap.realtime.listen({ session: (_w, _l, s) => sessions.push(s), response: (_w, _l, r) => responses.push(r) })
  return { clock, proxy, upstream, sessions, responses, baseURL: `${proxy.url.replace('http:', 'https:')}/openai/v1` }
}

/** Plays the schedule: each message at its time, the clock moved only once the client has the previous one. */
async function play(r: Rig, conn: UpstreamConnection, received: () => number): Promise<void> {
  for (const [at, event] of SCHEDULE) {
    const before = received()
    r.clock.set(at)
    conn.ws.send(JSON.stringify(event))
    await eventually(`the client to receive ${event.type}`, () => received() > before)
  }
}

const L = { provider: 'openai', model: 'gpt-realtime', route: '/openai' }

/** The scrape after one response of the schedule and its session's close: every figure exact. */
async function checkMetrics(t: Test, proxy: RunningProxy): Promise<void> {
  const m = await proxy.scrape()
  const one = (name: string, extra: Record<string, string> = {}): number => sumOf(m, name, { ...L, ...extra })
  t.equal(one('llm_realtime_sessions_total', { outcome: 'ok' }), 1)
  t.equal(one('llm_realtime_sessions_in_flight'), 0, 'no session left open')
  t.equal(one('llm_realtime_responses_total', { outcome: 'ok', error_type: 'none' }), 1)
  for (const name of ['llm_realtime_time_to_first_token_seconds', 'llm_realtime_time_to_first_audio_seconds']) {
    t.ok(near(one(`${name}_sum`), 0.3), `${name}: 0.3 s`)
    t.equal(one(`${name}_count`), 1)
    t.same([one(`${name}_bucket`, { le: '0.25' }), one(`${name}_bucket`, { le: '0.3' })], [0, 1], `${name} in the bucket (0.25, 0.3]`)
  }
  t.ok(near(one('llm_realtime_inter_token_latency_seconds_sum'), 0.41))
  t.equal(one('llm_realtime_inter_token_latency_seconds_count'), 1, 'one token after the first delta')
  t.ok(near(one('llm_realtime_audio_underrun_seconds_sum'), 0.2))
  t.same([one('llm_realtime_audio_underrun_seconds_bucket', { le: '0.1' }), one('llm_realtime_audio_underrun_seconds_bucket', { le: '0.25' })], [0, 1])
  t.same(
    [
      one('llm_realtime_tokens_total', { direction: 'input', modality: 'text' }),
      one('llm_realtime_tokens_total', { direction: 'input', modality: 'audio' }),
      one('llm_realtime_tokens_total', { direction: 'output', modality: 'text' }),
      one('llm_realtime_tokens_total', { direction: 'output', modality: 'audio' }),
    ],
    [10, 20, 3, 47],
    'tokens by direction and modality, exactly as response.done said',
  )
  t.equal(sumOf(m, 'llm_requests_total'), 0, 'a realtime session is not an HTTP request')
}

function checkResponse(t: Test, r: FinishedResponse): void {
  t.equal(r.id, 'resp_1')
  t.equal(r.outcome, 'ok')
  t.ok(near(r.timing.ttft as number, 0.3), `TTFT ${r.timing.ttft} = 1300 − 1000 ms`)
  t.ok(near(r.timing.ttfa as number, 0.3), 'time to first audio 0.3 s')
  t.equal(r.timing.itl.length, 1)
  t.ok(near(r.timing.itl[0][0], 0.41) && r.timing.itl[0][1] === 1, 'ITL: 410 ms over 1 token')
  t.ok(near(r.timing.underrun as number, 0.2), 'underrun: played 1300–1500, next audio at 1700')
  t.ok(near(r.timing.audioSeconds, 0.4))
  t.equal(r.timing.streamedTokens, 3)
  t.same(r.usage, { inputText: 10, inputAudio: 20, outputText: 3, outputAudio: 47 }, 'tokens exactly as response.done said')
}

t.test('OpenAIRealtimeWS (the ws client) through tokentap: frames identical both ways, close code and reason passed, the response measured exactly', async (t) => {
  const r = await rig(t)
  const client = new OpenAI({ apiKey: 'sk-realtime-secret', baseURL: r.baseURL })
  let clientTape: Tape | undefined
  const rt = new OpenAIRealtimeWS(
    {
      model: 'gpt-realtime',
      options: {
        ca: ca.read(ca.caCert),
        perMessageDeflate: false,
        // The client's socket, recorded after TLS (what the SDK's ws reads and writes).
        createConnection: (opts: ConnectionOptions) => {
          const socket = tlsConnect(opts)
          clientTape = Tape.of(socket)
          return socket
        },
      } as never,
    },
    client,
  )
  const events: string[] = []
  rt.on('event', (e) => events.push(e.type))
  rt.on('error', (err) => t.fail(String(err)))
  await new Promise<void>((resolve) => rt.socket.once('open', () => resolve()))
  const conn = await r.upstream.connection(1)
  t.equal(conn.req.url, '/v1/realtime?model=gpt-realtime', 'the prefix is stripped, the model query kept')
  t.equal(conn.req.headers.authorization, 'Bearer sk-realtime-secret')
  r.clock.set(5)
  conn.ws.send(JSON.stringify({ type: 'session.created', event_id: 'e0', session: { type: 'realtime', model: 'gpt-realtime', audio: { output: { format: { type: 'audio/pcm', rate: 24000 } } } } }))
  await eventually('session.created at the client', () => events.length === 1)

  r.clock.set(1000)
  rt.send({ type: 'response.create', response: { output_modalities: ['audio'] } })
  await conn.message(1)
  await play(r, conn, () => events.length)
  t.same(events, ['session.created', ...SCHEDULE.map(([, e]) => e.type)])

  await eventually('the response record', () => r.responses.length === 1)
  checkResponse(t, r.responses[0])

  r.clock.set(2000)
  rt.close({ code: 4000, reason: 'done talking' })
  t.same(await conn.closed, { code: 4000, reason: 'done talking' }, 'the close code and reason reached the upstream')
  await eventually('the session record', () => r.sessions.length === 1)
  const tape = clientTape as Tape
  t.same(tape.readAfterHead(), conn.tape.writtenAfterHead(), 'the client read exactly the bytes the upstream wrote')
  t.same(conn.tape.readAfterHead(), tape.writtenAfterHead(), 'the upstream read exactly the bytes the client wrote')
  const s = r.sessions[0]
  t.equal(s.outcome, 'ok')
  t.equal(s.responses, 1)
  t.ok(near(s.duration, 2), 'the session lasted from the upgrade (0) to the close (2000 ms)')
  t.notMatch(JSON.stringify(r.proxy.logs), /sk-realtime-secret/, 'the key is never logged')
  await checkMetrics(t, r.proxy)
})

t.test('OpenAIRealtimeWebSocket (the browser-style client on a WHATWG WebSocket) through tokentap: the key in the subprotocol passes, never logged', async (t) => {
  const r = await rig(t)
  const dispatcher = new Agent({ connect: { ca: ca.read(ca.caCert) } })
  t.teardown(() => dispatcher.close())
  // Node 20 has no global WebSocket; undici's is the one Node 22+ ships. The SDK calls `new WebSocket(url, protocols)`.
  class TrustingWebSocket extends UndiciWebSocket {
    constructor(url: string, protocols?: string | string[]) {
      super(url, { protocols, dispatcher } as never)
    }
  }
  const saved = globalThis.WebSocket
  ;(globalThis as { WebSocket: unknown }).WebSocket = TrustingWebSocket
  t.teardown(() => {
    ;(globalThis as { WebSocket: unknown }).WebSocket = saved
  })
  const client = new OpenAI({ apiKey: 'sk-browser-secret', baseURL: r.baseURL })
  const rt = new OpenAIRealtimeWebSocket({ model: 'gpt-realtime', dangerouslyAllowBrowser: true }, client)
  const events: string[] = []
  rt.on('event', (e) => events.push(e.type))
  rt.on('error', (err) => t.fail(String(err)))
  await new Promise<void>((resolve) => rt.socket.addEventListener('open', () => resolve()))
  const conn = await r.upstream.connection(1)
  t.equal(conn.req.headers['sec-websocket-protocol'], 'realtime, openai-insecure-api-key.sk-browser-secret')
  r.clock.set(1000)
  rt.send({ type: 'response.create' })
  await conn.message(1)
  await play(r, conn, () => events.length)
  await eventually('the response record', () => r.responses.length === 1)
  checkResponse(t, r.responses[0])
  rt.close({ code: 1000, reason: 'bye' })
  t.same(await conn.closed, { code: 1000, reason: 'bye' })
  await eventually('the session record', () => r.sessions.length === 1)
  t.equal(r.sessions[0].outcome, 'ok')
  t.notMatch(JSON.stringify(r.proxy.logs), /sk-browser-secret/, 'the key in the subprotocol is never logged')
  await checkMetrics(t, r.proxy)
})

t.test('the SDK leaves mid-response: the response is cancelled, nothing stays in flight, the upstream connection is closed', async (t) => {
  const r = await rig(t)
  const client = new OpenAI({ apiKey: 'sk-x', baseURL: r.baseURL })
  const rt = new OpenAIRealtimeWS({ model: 'gpt-realtime', options: { ca: ca.read(ca.caCert) } as never }, client)
  rt.on('error', () => {})
  const events: string[] = []
  rt.on('event', (e) => events.push(e.type))
  await new Promise<void>((resolve) => rt.socket.once('open', () => resolve()))
  const conn = await r.upstream.connection(1)
  r.clock.set(1000)
  rt.send({ type: 'response.create' })
  await conn.message(1)
  r.clock.set(1050)
  conn.ws.send(JSON.stringify(SCHEDULE[0][1]))
  await eventually('response.created at the client', () => events.length === 1)
  r.clock.set(1100)
  rt.socket.terminate()
  t.equal((await conn.closed).code, 1006, 'the upstream connection was closed')
  await eventually('the records', () => r.sessions.length === 1)
  t.same(
    r.responses.map((x) => x.outcome),
    ['cancelled'],
  )
  t.equal(r.sessions[0].outcome, 'cancelled')
  t.equal(r.proxy.app.tokentap.realtime.open.size, 0)
  const m = await r.proxy.scrape()
  t.equal(sumOf(m, 'llm_realtime_responses_total', { ...L, outcome: 'cancelled', error_type: 'client_cancelled' }), 1)
  t.equal(sumOf(m, 'llm_realtime_sessions_total', { ...L, outcome: 'cancelled' }), 1)
  t.equal(sumOf(m, 'llm_realtime_sessions_in_flight', L), 0, 'nothing left in flight')
})
