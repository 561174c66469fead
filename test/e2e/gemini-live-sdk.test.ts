import t from 'tap'
import { GoogleGenAI, Modality } from '@google/genai'
import type { LiveServerMessage } from '@google/genai'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import type { SessionSummary } from '../../src/realtime/session.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { eventually, startWsUpstream } from '../helpers/realtime.ts'
import { VirtualClock, near } from '../helpers/virtual-time.ts'

/**
 * The Google Gen AI SDK's live client (`ai.live.connect`, Gemini Live over WebSocket, on `ws` in
 * Node) through tokentap: against an upstream that sends a known schedule on virtual time (its
 * messages as binary frames, as Gemini sends them), and against the built-in simulator.
 */

/** 4,800 bytes of PCM16 at 24 kHz: 100 ms. */
const AUDIO_100MS = Buffer.alloc(4800).toString('base64')
const audioPart = { serverContent: { modelTurn: { parts: [{ inlineData: { mimeType: 'audio/pcm;rate=24000', data: AUDIO_100MS } }] } } }
const USAGE = {
  promptTokenCount: 11,
  responseTokenCount: 64,
  totalTokenCount: 75,
  promptTokensDetails: [{ modality: 'TEXT', tokenCount: 11 }],
  responseTokensDetails: [{ modality: 'AUDIO', tokenCount: 64 }],
}
/** The client's turn ends at 1000 ms; the model's messages at these times. */
const SCHEDULE: [number, Record<string, unknown>][] = [
  [1400, audioPart],
  [1410, { serverContent: { outputTranscription: { text: ' the' } } }],
  [1450, audioPart],
  [1460, { serverContent: { outputTranscription: { text: ' of and' } } }],
  // 100 + 100 ms queued from 1400: empty at 1600; the next at 1750: 150 ms silent.
  [1750, audioPart],
  [1760, { serverContent: { generationComplete: true } }],
  [1800, { serverContent: { turnComplete: true }, usageMetadata: USAGE }],
]

t.test('the Gen AI SDK’s live client through tokentap: the key in the query passes, never logged; the turn measured exactly', async (t) => {
  const clock = new VirtualClock()
  const upstream = await startWsUpstream({ perMessageDeflate: false })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/gemini', upstream: upstream.url, provider: 'gemini' }] }, { now: clock.now })
  t.teardown(() => proxy.close())
  const responses: FinishedResponse[] = []
  const sessions: SessionSummary[] = []
  proxy.app.tokentap.realtime.listen({ response: (_w, _l, r) => responses.push(r), session: (_w, _l, s) => sessions.push(s) })

  const ai = new GoogleGenAI({ apiKey: 'goog-live-secret', httpOptions: { baseUrl: `${proxy.url}/gemini` } })
  const received: LiveServerMessage[] = []
  let closed: { code: number; reason: string } | undefined
  const connecting = ai.live.connect({
    model: 'gemini-2.5-flash-native-audio-preview',
    config: { responseModalities: [Modality.AUDIO], outputAudioTranscription: {} },
    callbacks: {
      onmessage: (m) => received.push(m),
      onclose: (e) => {
        closed = { code: e.code, reason: e.reason }
      },
    },
  })
  const conn = await upstream.connection(1)
  const session = await connecting
  t.match(conn.req.url, /^\/ws\/google\.ai\.generativelanguage\.v1beta\.GenerativeService\.BidiGenerateContent\?key=goog-live-secret$/)
  const setup = JSON.parse((await conn.message(1)).data.toString()) as { setup: { model: string } }
  t.equal(setup.setup.model, 'models/gemini-2.5-flash-native-audio-preview')
  conn.ws.send(JSON.stringify({ setupComplete: {} }), { binary: true })
  await eventually('setupComplete at the client', () => received.length === 1)

  clock.set(1000)
  session.sendClientContent({ turns: 'Hello', turnComplete: true })
  await conn.message(2)
  for (const [at, message] of SCHEDULE) {
    const before = received.length
    clock.set(at)
    conn.ws.send(JSON.stringify(message), { binary: true })
    await eventually('the client to receive it', () => received.length > before)
  }
  await eventually('the turn record', () => responses.length === 1)
  const r = responses[0]
  t.equal(r.outcome, 'ok')
  t.ok(near(r.timing.ttft as number, 0.4), `TTFT ${r.timing.ttft}`)
  t.ok(near(r.timing.ttfa as number, 0.4))
  t.ok(near(r.timing.underrun as number, 0.15), `underrun ${r.timing.underrun}`)
  t.ok(near(r.timing.audioSeconds, 0.3))
  t.same(
    r.timing.itl.map(([v, w]) => [Math.round(v * 1e6) / 1e6, w]),
    [[0.025, 2]],
    'ITL: 50 ms over the 2 tokens of the second transcript delta',
  )
  t.same(r.usage, { inputText: 11, inputAudio: 0, outputText: 0, outputAudio: 64 })
  clock.set(2000)
  session.close()
  await eventually('the session record', () => sessions.length === 1)
  t.equal(sessions[0].outcome, 'ok')
  t.equal(sessions[0].responses, 1)
  await eventually('the client’s close', () => closed !== undefined)
  t.equal(closed?.code, 1005, 'the SDK closes with no code, and the close came back as it was sent')
  t.equal(sessions[0].close?.code, undefined)
  const line = proxy.logs.find((l) => l.msg === 'realtime session') as Record<string, unknown>
  t.equal(line.provider, 'gemini')
  t.equal(line.model, 'gemini-2.5-flash-native-audio-preview', 'the model comes from the setup message')
  t.notMatch(JSON.stringify(proxy.logs), /goog-live-secret/, 'the key in the query is never logged')
})

t.test('the Gen AI SDK’s live client against the built-in simulator: a text turn and an audio turn', async (t) => {
  const proxy = await startProxy({ routes: [simRoute('/sim', { tokens: 6, ttft_ms: 20, itl_ms: 5, audio_ms_per_token: 50, audio_pace: 4 })] })
  t.teardown(() => proxy.close())
  const responses: FinishedResponse[] = []
  proxy.app.tokentap.realtime.listen({ response: (_w, _l, r) => responses.push(r) })
  const ai = new GoogleGenAI({ apiKey: 'k', httpOptions: { baseUrl: `${proxy.url}/sim` } })
  for (const [modality, n] of [
    [Modality.TEXT, 1],
    [Modality.AUDIO, 2],
  ] as const) {
    let text = ''
    let audio = 0
    let turns = 0
    const session = await ai.live.connect({
      model: 'gemini-live-sim',
      config: { responseModalities: [modality], outputAudioTranscription: {} },
      callbacks: {
        onmessage: (m) => {
          // The parts themselves: the SDK's text and data getters warn on a turn that mixes kinds.
          for (const part of m.serverContent?.modelTurn?.parts ?? []) {
            text += part.text ?? ''
            audio += part.inlineData?.data === undefined ? 0 : Buffer.from(part.inlineData.data, 'base64').length
          }
          text += m.serverContent?.outputTranscription?.text ?? ''
          if (m.serverContent?.turnComplete === true) turns++
        },
      },
    })
    session.sendClientContent({ turns: 'Hello', turnComplete: true })
    await eventually('the model’s turn', () => turns === 1)
    session.close()
    t.equal(text.split(' ').length - 1, 6, `${modality}: every word arrived`)
    t.equal(audio, modality === Modality.AUDIO ? 6 * 50 * 48 : 0)
    await eventually('the turn record', () => responses.length === n)
    const r = responses[n - 1]
    t.equal(r.outcome, 'ok')
    t.equal(r.timing.streamedTokens, 6)
    t.ok((r.timing.ttft as number) > 0)
    t.ok(modality === Modality.AUDIO ? near(r.timing.audioSeconds, 0.3) : r.timing.audioSeconds === 0)
    t.ok(r.usage !== undefined)
  }
})
