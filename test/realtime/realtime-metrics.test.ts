import t from 'tap'
import type { FinishedResponse } from '../../src/timing/realtime-timing.ts'
import { testPolicy } from '../helpers/observe.ts'
import { ResponseTimeline } from '../../src/timing/realtime-timing.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { startProxy } from '../helpers/proxy.ts'
import { rawExchange } from '../helpers/raw-socket.ts'
import { eventually, startWsUpstream, tapedClient } from '../helpers/realtime.ts'

/** A response's observations under the recording policy (the figures, without its label set). */
function responseObservations(r: FinishedResponse) {
  const policy = testPolicy()
  const { labels: _labels, labelSet: _set, ...figures } = policy.observeResponse(policy.labels.of('openai', '/r', 'm', undefined), r)
  return figures
}

t.test('what a response adds: figures whatever the outcome, tokens only as reported and above 0', async (t) => {
  const timeline = new ResponseTimeline(0)
  timeline.text(100, 1)
  timeline.text(150, 2)
  const o = responseObservations({
    id: 'r',
    start: 0,
    end: 200,
    outcome: 'cancelled',
    detail: undefined,
    timing: timeline.timing(),
    usage: { inputText: 5, inputAudio: 0, outputText: 3, outputAudio: 0 },
  })
  t.equal(o.outcome, 'cancelled')
  t.equal(o.errorType, 'client_cancelled')
  t.equal(o.ttft, 0.1)
  t.equal(o.ttfa, undefined)
  t.equal(o.underrun, undefined, 'no audio, no underrun observation')
  t.same(o.itl, [[0.025, 2]])
  t.same(o.tokens, [
    { direction: 'input', modality: 'text', count: 5 },
    { direction: 'output', modality: 'text', count: 3 },
  ])
  const refused = responseObservations({ id: undefined, start: 0, end: 1, outcome: 'error', detail: 'x', timing: new ResponseTimeline(0).timing(), usage: undefined })
  t.same(refused, { outcome: 'error', errorType: 'stream_error', ttft: undefined, ttfa: undefined, itl: [], underrun: undefined, tokens: [] }, 'a reason no table names: stream_error')
  const limited = responseObservations({ id: undefined, start: 0, end: 1, outcome: 'error', detail: 'rate_limit_exceeded', timing: new ResponseTimeline(0).timing(), usage: undefined })
  t.equal(limited.errorType, 'upstream_rate_limited', "OpenAI Realtime's rate_limit_exceeded error")
})

t.test('the in-flight gauge counts an open session, by its labels; a refused upgrade is an error session', async (t) => {
  const upstream = await startWsUpstream({
    onUpgrade: (req, socket) => {
      if (!req.url?.includes('refuse')) return false
      socket.end('HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n')
      return true
    },
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/rt', name: 'voice', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  const L = { provider: 'openai', model: 'gpt-realtime-mini', route: 'voice' }
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime?model=gpt-realtime-mini`)
  await client.opened
  t.equal(sumOf(await proxy.scrape(), 'llm_realtime_sessions_in_flight', L), 1)
  client.ws.close(1000)
  await client.closed
  await eventually('the session record', () => proxy.app.tokentap.realtime.open.size === 0)
  let m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_realtime_sessions_in_flight', L), 0, 'the series stays, at 0')
  t.equal(sumOf(m, 'llm_realtime_sessions_total', { ...L, outcome: 'ok' }), 1)

  const answer = await rawExchange(
    Number(new URL(proxy.url).port),
    'GET /rt/v1/realtime/refuse?model=gpt-realtime-mini HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
  )
  t.match(answer.toString('latin1'), /^HTTP\/1\.1 429 /)
  await eventually('the refused session', async () => sumOf(await proxy.scrape(), 'llm_realtime_sessions_total', { ...L, outcome: 'error' }) === 1)
  m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_realtime_sessions_total', { ...L, outcome: 'error' }), 1)
})
