import type { AddressInfo } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { validateConfig } from '../../src/config/load-config.ts'
import { buildSimulator } from '../../src/sim/sim-app.ts'
import { realtimePlanFor, silenceBase64 } from '../../src/sim/realtime-player.ts'
import { defined } from '../helpers/defined.ts'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { eventually, respond, tapedClient } from '../helpers/realtime.ts'
import type { TapedClient } from '../helpers/realtime.ts'

const simConfig = (extra: Record<string, unknown> = {}) =>
  defined(
    validateConfig({
      routes: [{ prefix: '/sim', simulator: { jitter_ms: 0, stall_probability: 0, burst_every: 0, ttft_ms: 5, itl_ms: 2, tokens: 4, audio_ms_per_token: 10, audio_pace: 50, ...extra } }],
    }).routes[0].simulator,
    'a simulator config',
  )

async function sim(t: Test, extra: Record<string, unknown> = {}): Promise<string> {
  const app = buildSimulator(simConfig(extra))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return `ws://127.0.0.1:${(app.server.address() as AddressInfo).port}`
}

const types = (c: TapedClient): string[] => c.messages.map((m) => (JSON.parse(m.data.toString()) as { type: string }).type)
const event = (c: TapedClient, n: number): Record<string, unknown> => JSON.parse(defined(c.messages[n - 1], `message ${n}`).data.toString()) as Record<string, unknown>

async function untilDone(c: TapedClient, count = 1): Promise<void> {
  await eventually('response.done', () => types(c).filter((x) => x === 'response.done').length >= count)
}

t.test('an OpenAI Realtime session: GA event names, an audio response with its transcript, usage in response.done', async (t) => {
  const url = await sim(t)
  const c = tapedClient(`${url}/v1/realtime?model=gpt-realtime`, { perMessageDeflate: false })
  await c.opened
  await c.message(1)
  t.same(event(c, 1).type, 'session.created')
  t.same((event(c, 1).session as { model: string }).model, 'gpt-realtime')
  c.ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: silenceBase64(4800) }))
  c.ws.send(JSON.stringify({ type: 'response.create' }))
  await untilDone(c)
  const seen = types(c)
  t.same(seen.slice(1, 4), ['response.created', 'response.output_item.added', 'response.content_part.added'])
  t.equal(seen.filter((x) => x === 'response.output_audio.delta').length, 4)
  t.equal(seen.filter((x) => x === 'response.output_audio_transcript.delta').length, 4)
  t.same(seen.slice(-4), ['response.output_audio.done', 'response.output_audio_transcript.done', 'response.output_item.done', 'response.done'])
  const done = event(c, seen.length).response as { status: string; usage: Record<string, unknown> }
  t.equal(done.status, 'completed')
  t.same(done.usage, {
    total_tokens: 1 + 1 + 4 + 1,
    input_tokens: 2,
    output_tokens: 5,
    input_token_details: { text_tokens: 1, audio_tokens: 1, cached_tokens: 0 },
    output_token_details: { text_tokens: 4, audio_tokens: 1 },
  })
  c.ws.close(1000)
  t.same(await c.closed, { code: 1000, reason: '' })
})

t.test('the beta event names with OpenAI-Beta: realtime=v1; a text response; an exact plan from response.create', async (t) => {
  const url = await sim(t)
  const c = tapedClient(`${url}/v1/realtime`, { headers: { 'OpenAI-Beta': 'realtime=v1' } })
  await c.opened
  c.ws.send(JSON.stringify({ type: 'response.create', response: { modalities: ['text'] }, tokentap_sim: { ttft_ms: 1, first_tokens: 2, chunks: [[1, 3]] } }))
  await untilDone(c)
  const deltas = c.messages.map((m) => JSON.parse(m.data.toString()) as { type: string; delta?: string }).filter((e) => e.type === 'response.text.delta')
  t.same(
    deltas.map((d) => (d.delta ?? '').split(' ').length - 1),
    [2, 3],
  )
  c.ws.close(1000)
  await c.closed
})

t.test('response.cancel ends the response as cancelled; a second response.create while one plays is refused', async (t) => {
  const url = await sim(t, { ttft_ms: 10_000 })
  const c = tapedClient(`${url}/v1/realtime`)
  await c.opened
  c.ws.send(JSON.stringify({ type: 'response.create' }))
  await eventually('response.created', () => types(c).includes('response.created'))
  c.ws.send(JSON.stringify({ type: 'response.create', event_id: 'evt_2' }))
  await eventually('the refusal', () => types(c).includes('error'))
  const error = c.messages.map((m) => JSON.parse(m.data.toString()) as { type: string; error?: { code: string; event_id: string } }).find((e) => e.type === 'error')
  t.same(error?.error?.code, 'conversation_already_has_active_response')
  t.same(error?.error?.event_id, 'evt_2')
  c.ws.send(JSON.stringify({ type: 'response.cancel' }))
  await untilDone(c)
  t.equal((event(c, c.messages.length).response as { status: string }).status, 'cancelled')
  c.ws.close(1000)
  await c.closed
})

t.test('error_after sends an error event and a failed response.done; close_after closes with 1011', async (t) => {
  const url = await sim(t)
  const c = tapedClient(`${url}/v1/realtime`)
  await c.opened
  c.ws.send(JSON.stringify({ type: 'response.create', tokentap_sim: { error_after: 2 } }))
  await untilDone(c)
  t.equal(types(c).filter((x) => x === 'response.output_audio.delta').length, 2)
  t.equal(types(c).at(-2), 'error')
  t.equal((event(c, c.messages.length).response as { status: string }).status, 'failed')
  c.ws.send(JSON.stringify({ type: 'response.create', tokentap_sim: { close_after: 1 } }))
  t.same(await c.closed, { code: 1011, reason: 'simulated server error' })
})

t.test('with turn detection on, a commit starts a response by itself', async (t) => {
  const url = await sim(t)
  const c = tapedClient(`${url}/v1/realtime`)
  await c.opened
  c.ws.send(JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: { type: 'server_vad' } } } } }))
  c.ws.send(JSON.stringify({ type: 'input_audio_buffer.commit' }))
  await untilDone(c)
  t.same(types(c).slice(0, 4), ['session.created', 'session.updated', 'input_audio_buffer.committed', 'response.created'])
  c.ws.close(1000)
  await c.closed
})

t.test('the Gemini Live endpoint answers the v1 path (@google/genai 3.x) as well as v1alpha and v1beta', async (t) => {
  const url = await sim(t, { ttft_ms: 5 })
  for (const version of ['v1', 'v1alpha', 'v1beta']) {
    const c = tapedClient(`${url}/ws/google.ai.generativelanguage.${version}.GenerativeService.BidiGenerateContent?key=k`)
    await c.opened
    c.ws.send(JSON.stringify({ setup: { model: 'models/x' } }))
    await c.message(1)
    t.same(JSON.parse(c.messages[0].data.toString()), { setupComplete: {} }, `${version}: setupComplete`)
    c.ws.close(1000)
    await c.closed
  }
})

t.test('a Gemini Live session: setupComplete, a text turn in binary frames, turnComplete with usage; a client turn interrupts', async (t) => {
  const url = await sim(t, { ttft_ms: 5 })
  const c = tapedClient(`${url}/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=k`)
  await c.opened
  c.ws.send(JSON.stringify({ setup: { model: 'models/x', generationConfig: { responseModalities: ['TEXT'] } } }))
  await c.message(1)
  t.same(JSON.parse(c.messages[0].data.toString()), { setupComplete: {} })
  t.ok(c.messages[0].binary, 'sent as a binary frame')
  c.ws.send(JSON.stringify({ clientContent: { turns: [{ role: 'user', parts: [{ text: 'hi' }] }], turnComplete: true } }))
  await eventually('turnComplete', () => c.messages.some((m) => m.data.toString().includes('turnComplete')))
  const parts = c.messages.map((m) => JSON.parse(m.data.toString()) as { serverContent?: { modelTurn?: unknown; turnComplete?: boolean }; usageMetadata?: { responseTokenCount: number } })
  t.equal(parts.filter((m) => m.serverContent?.modelTurn !== undefined).length, 4)
  t.equal(parts.at(-1)?.usageMetadata?.responseTokenCount, 4)
  c.ws.close(1000)
  await c.closed

  const slow = tapedClient(`${await sim(t, { ttft_ms: 10_000 })}/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent`)
  await slow.opened
  slow.ws.send(JSON.stringify({ realtimeInput: { activityEnd: {} } }))
  slow.ws.send(JSON.stringify({ realtimeInput: { activityEnd: {} } }))
  await slow.message(1)
  t.same(JSON.parse(slow.messages[0].data.toString()), { serverContent: { interrupted: true } })
  slow.ws.close(1000)
  await slow.closed
})

t.test('other paths are refused with 404', async (t) => {
  const url = await sim(t)
  const c = tapedClient(`${url}/v1/other`)
  await t.rejects(c.opened, /404/)
})

t.test('the default plan paces audio by audio_pace: slower than real time a listener runs dry, faster it does not', async (t) => {
  const paced = (pace: number) => realtimePlanFor(simConfig({ tokens: 5, audio_ms_per_token: 100, audio_pace: pace, ttft_ms: 7 }), undefined, 0, true)
  t.same(
    paced(0.5).steps.map((s) => s.afterMs),
    [7, 200, 200, 200, 200],
  )
  t.same(
    paced(2).steps.map((s) => s.afterMs),
    [7, 50, 50, 50, 50],
  )
  t.same(
    realtimePlanFor(simConfig({ tokens: 3, itl_ms: 9, ttft_ms: 7 }), undefined, 0, false).steps.map((s) => s.afterMs),
    [7, 9, 9],
    'text responses keep the ITL',
  )

  // Through tokentap: the underrun follows the pacing.
  const proxy = await startProxy({ routes: [simRoute('/sim', { tokens: 4, ttft_ms: 1, audio_ms_per_token: 100 })] })
  t.teardown(() => proxy.close())
  const responses: FinishedResponse[] = []
  proxy.app.tokentap.realtime.listen({ response: (_w, _l, r) => responses.push(r) })
  const c = tapedClient(`${proxy.url.replace('http', 'ws')}/sim/v1/realtime`)
  await c.opened
  // Each step carries 100 ms of audio: sent every 300 ms (pace 1/3) the listener waits ~200 ms three times; every 10 ms never.
  const steps = (gap: number): [number, number][] => [
    [gap, 1],
    [gap, 1],
    [gap, 1],
  ]
  await respond(c, { ttft_ms: 1, chunks: steps(300) }, 1)
  await respond(c, { ttft_ms: 1, chunks: steps(10) }, 2)
  await eventually('both responses', () => responses.length === 2)
  t.ok((responses[0].timing.underrun as number) > 0.3, `slower than real time: underrun ${responses[0].timing.underrun} s`)
  t.equal(responses[1].timing.underrun, 0, 'faster than real time: none')
  c.ws.close(1000)
  await c.closed
})
