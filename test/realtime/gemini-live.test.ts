import t from 'tap'
import { GeminiLive } from '../../src/realtime/gemini-live.ts'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import { near } from '../helpers/virtual-time.ts'

function protocol(): { p: GeminiLive; done: FinishedResponse[]; models: string[] } {
  const done: FinishedResponse[] = []
  const models: string[] = []
  const p = new GeminiLive({ countTokens: (text) => text.split(' ').filter(Boolean).length, finished: (r) => done.push(r), model: (m) => models.push(m) })
  return { p, done, models }
}

const pcm = (bytes: number): Record<string, unknown> => ({
  serverContent: { modelTurn: { parts: [{ inlineData: { mimeType: 'audio/pcm;rate=24000', data: Buffer.alloc(bytes).toString('base64') } }] } },
})
const usage = {
  promptTokenCount: 12,
  responseTokenCount: 40,
  thoughtsTokenCount: 5,
  promptTokensDetails: [
    { modality: 'TEXT', tokenCount: 9 },
    { modality: 'AUDIO', tokenCount: 3 },
  ],
  responseTokensDetails: [{ modality: 'AUDIO', tokenCount: 40 }],
}

t.test('a turn: starts at the client’s turn end; audio, transcript, usage with the turn’s end', async (t) => {
  const { p, done, models } = protocol()
  p.client({ setup: { model: 'models/gemini-2.5-flash-native-audio' } }, 0)
  p.server({ setupComplete: {} }, 5)
  p.client({ clientContent: { turns: [{ role: 'user', parts: [{ text: 'hi' }] }], turnComplete: true } }, 100)
  t.equal(p.inFlight, 1)
  p.server(pcm(4800), 400)
  p.server({ serverContent: { outputTranscription: { text: 'hello' } } }, 410)
  p.server(pcm(4800), 700)
  p.server({ serverContent: { outputTranscription: { text: 'you two' } } }, 710)
  p.server({ serverContent: { generationComplete: true } }, 720)
  p.server({ serverContent: { turnComplete: true }, usageMetadata: usage }, 730)
  t.same(models, ['gemini-2.5-flash-native-audio'])
  t.equal(done.length, 1)
  const r = done[0]
  t.equal(r.outcome, 'ok')
  t.ok(near(r.timing.ttft as number, 0.3))
  t.ok(near(r.timing.ttfa as number, 0.3))
  // 100 ms of audio at 400; the next at 700: 200 ms silent.
  t.ok(near(r.timing.underrun as number, 0.2))
  t.ok(near(r.timing.itl[0][0], 0.15) && r.timing.itl[0][1] === 2)
  t.same(r.usage, { inputText: 9, inputAudio: 3, outputText: 5, outputAudio: 40 }, 'thinking counts as output text')
  t.equal(p.inFlight, 0)
})

t.test('usage right after the turn’s end belongs to that turn; without it the turn ends at the next message', async (t) => {
  const { p, done } = protocol()
  p.client({ realtimeInput: { activityEnd: {} } }, 0)
  p.server({ serverContent: { modelTurn: { parts: [{ text: 'a b' }] } } }, 50)
  p.server({ serverContent: { turnComplete: true } }, 60)
  t.equal(done.length, 0, 'waiting one message for usage')
  p.server({ usageMetadata: { promptTokenCount: 4, responseTokenCount: 2 } }, 61)
  t.same(done[0].usage, { inputText: 4, inputAudio: 0, outputText: 2, outputAudio: 0 })
  t.equal(done[0].end, 60)
  p.client({ clientContent: { turnComplete: true } }, 100)
  p.server({ serverContent: { modelTurn: { parts: [{ text: 'c' }] } } }, 150)
  p.server({ serverContent: { turnComplete: true } }, 160)
  p.client({ clientContent: { turnComplete: true } }, 200)
  t.equal(done.length, 2)
  t.equal(done[1].usage, undefined)
  t.ok(near(done[1].timing.ttft as number, 0.05))
})

t.test('the user speaking over the model interrupts the turn: cancelled; thoughts are not output text deltas', async (t) => {
  const { p, done } = protocol()
  p.client({ realtimeInput: { audioStreamEnd: true } }, 0)
  p.server({ serverContent: { modelTurn: { parts: [{ text: 'thinking', thought: true }] } } }, 10)
  p.server(pcm(480), 20)
  p.server({ serverContent: { interrupted: true } }, 30)
  p.server({ serverContent: { turnComplete: true }, usageMetadata: usage }, 40)
  t.equal(done.length, 1)
  t.equal(done[0].outcome, 'cancelled')
  t.equal(done[0].timing.textDeltas, 0)
  t.same(done[0].usage, { inputText: 9, inputAudio: 3, outputText: 5, outputAudio: 40 }, 'the usage after the interruption is the interrupted turn’s')
})

t.test('a tool call ends the turn when the client answers it; a client turn over an open turn cancels it', async (t) => {
  const { p, done } = protocol()
  p.client({ clientContent: { turnComplete: true } }, 0)
  p.server({ toolCall: { functionCalls: [{ id: 'f1', name: 'lookup', args: {} }] } }, 100)
  p.client({ toolResponse: { functionResponses: [{ id: 'f1', response: {} }] } }, 200)
  p.server({ serverContent: { modelTurn: { parts: [{ text: 'found it' }] } } }, 300)
  p.client({ clientContent: { turnComplete: true } }, 350)
  p.end('cancelled', 400)
  t.same(
    done.map((r) => [r.outcome, r.start]),
    [
      ['ok', 0],
      ['cancelled', 200],
      ['cancelled', 350],
    ],
  )
})

t.test('a turn the server starts by itself (automatic activity detection) has no start: no TTFT, the rest is measured', async (t) => {
  const { p, done } = protocol()
  p.client({ realtimeInput: { audio: { data: 'AAAA', mimeType: 'audio/pcm;rate=16000' } } }, 0)
  p.server(pcm(4800), 500)
  p.server({ serverContent: { turnComplete: true }, usageMetadata: usage }, 600)
  t.equal(done[0].timing.ttft, undefined)
  t.ok(near(done[0].timing.audioSeconds, 0.1))
})

t.test('shapes it does not expect are ignored, never thrown on', async (t) => {
  const { p, done } = protocol()
  for (const bad of [
    { serverContent: { modelTurn: { parts: 'x' } } },
    { serverContent: { modelTurn: { parts: [null, 3, { inlineData: { data: 'AA', mimeType: 'video/mp4' } }] } } },
    { usageMetadata: { promptTokensDetails: [null, { modality: 'TEXT' }] } },
    { setup: 'x' },
    {},
  ]) {
    p.server(bad, 1)
    p.client(bad, 1)
  }
  p.end('ok', 2)
  t.equal(done.length, 0)
})

t.test('the turns in flight, for the cluster’s progress reports: one asked for with its start only, the open one with its timeline, one ended and waiting for its usage', async (t) => {
  const { p } = protocol()
  const seen = (): [number | undefined, boolean][] => {
    const out: [number | undefined, boolean][] = []
    p.forEachInFlight((_ref, start, timeline) => out.push([start, timeline !== undefined]))
    return out
  }
  t.same(seen(), [], 'none')
  p.client({ clientContent: { turnComplete: true } }, 10)
  t.same(seen(), [[10, false]], 'asked for')
  p.server({ serverContent: { modelTurn: { parts: [{ text: 'hi there' }] } } }, 30)
  t.same(seen(), [[10, true]], 'begun')
  p.server({ serverContent: { turnComplete: true } }, 40)
  t.same(seen(), [[10, true]], 'ended, waiting for its usage: not recorded yet')
  p.server({ usageMetadata: usage }, 45)
  t.same(seen(), [], 'recorded')
})
