import t from 'tap'
import { GeminiLive } from '../../src/realtime/gemini-live.ts'
import { OpenAIRealtime } from '../../src/realtime/openai-realtime.ts'
import { DEFAULT_BYTES_PER_SECOND, mimeBytesPerSecond, openAIBytesPerSecond } from '../../src/realtime/audio-format.ts'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import type { RealtimeUsage } from '../../src/timing/realtime-timing.ts'
import { near } from '../helpers/virtual-time.ts'

// Realtime frames carry numbers an upstream controls: usage counts and audio sample rates. None
// may poison a counter (infinite, negative, huge, fractional) or an audio figure.

const BOGUS: unknown[] = [1e30, Number.POSITIVE_INFINITY, -5, 1.5, 2 ** 60, 1e9 + 1, '12', null, true, {}]

const isFigure = (u: RealtimeUsage | undefined): boolean => u === undefined || Object.values(u).every((v) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= 4e9)

t.test('OpenAI Realtime: a response.done usage count that is no count is not used', async (t) => {
  for (const bogus of BOGUS) {
    const done: FinishedResponse[] = []
    const p = new OpenAIRealtime({ countTokens: () => 1, finished: (r) => done.push(r), model: () => {} })
    p.client({ type: 'response.create' }, 0)
    p.server({ type: 'response.created', response: { id: 'r' } }, 1)
    p.server(
      {
        type: 'response.done',
        response: {
          id: 'r',
          status: 'completed',
          usage: { input_tokens: bogus, output_tokens: 7, input_token_details: { text_tokens: bogus, audio_tokens: 3 }, output_token_details: { text_tokens: 7, audio_tokens: bogus } },
        },
      },
      10,
    )
    t.equal(done.length, 1)
    t.ok(isFigure(done[0].usage), `${String(bogus)}: finite, non-negative integers`)
    t.same(done[0].usage, { inputText: 0, inputAudio: 3, outputText: 7, outputAudio: 0 }, `${String(bogus)}: the valid counts only`)
  }
})

t.test('Gemini Live: usageMetadata counts that are no counts, or details that add up past the bound, are not used', async (t) => {
  for (const bogus of BOGUS) {
    const done: FinishedResponse[] = []
    const p = new GeminiLive({ countTokens: () => 1, finished: (r) => done.push(r), model: () => {} })
    p.client({ setup: { model: 'models/g' } }, 0)
    p.server({ setupComplete: {} }, 1)
    p.client({ clientContent: { turns: [{ role: 'user', parts: [{ text: 'hi' }] }], turnComplete: true } }, 2)
    p.server({ serverContent: { outputTranscription: { text: 'a' } } }, 5)
    const many = Array.from({ length: 10 }, () => ({ modality: 'AUDIO', tokenCount: 1e9 }))
    p.server(
      {
        serverContent: { turnComplete: true },
        usageMetadata: { promptTokenCount: bogus, thoughtsTokenCount: bogus, promptTokensDetails: many, responseTokensDetails: [{ modality: 'TEXT', tokenCount: bogus }] },
      },
      10,
    )
    t.equal(done.length, 1)
    t.ok(isFigure(done[0].usage), `${String(bogus)}: finite, non-negative integers`)
    t.same(done[0].usage, { inputText: 0, inputAudio: 0, outputText: 0, outputAudio: 0 }, `${String(bogus)}: nothing poisonous is used`)
  }
})

t.test('an absurd audio sample rate falls back to the default rate', async (t) => {
  for (const rate of [0, 1, 999, 768_001, 1e30, Number.POSITIVE_INFINITY, -24_000, Number.NaN]) {
    t.equal(openAIBytesPerSecond({ type: 'audio/pcm', rate }), DEFAULT_BYTES_PER_SECOND, `OpenAI rate ${rate}`)
    t.equal(mimeBytesPerSecond(`audio/pcm;rate=${rate}`), DEFAULT_BYTES_PER_SECOND, `Gemini rate ${rate}`)
  }
  t.equal(openAIBytesPerSecond({ type: 'audio/pcm', rate: 16_000 }), 32_000, 'a real rate is used')
  t.equal(mimeBytesPerSecond('audio/pcm;rate=16000'), 32_000)
  // Through the protocol: a session.updated with a rate of 1e-300 leaves the audio seconds sane.
  const done: FinishedResponse[] = []
  const p = new OpenAIRealtime({ countTokens: () => 1, finished: (r) => done.push(r), model: () => {} })
  p.server({ type: 'session.updated', session: { audio: { output: { format: { type: 'audio/pcm', rate: 1e-300 } } } } }, 0)
  p.client({ type: 'response.create' }, 0)
  p.server({ type: 'response.created', response: { id: 'r' } }, 1)
  p.server({ type: 'response.output_audio.delta', response_id: 'r', delta: Buffer.alloc(48_000).toString('base64') }, 10)
  p.server({ type: 'response.done', response: { id: 'r', status: 'completed' } }, 20)
  t.ok(near(done[0].timing.audioSeconds, 1), 'one second of audio at the default 24 kHz')
})
