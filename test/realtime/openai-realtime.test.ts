import t from 'tap'
import { OpenAIRealtime } from '../../src/realtime/openai-realtime.ts'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import { near } from '../helpers/virtual-time.ts'

/** A protocol whose finished responses the test sees; each word of a delta is one token. */
function protocol(): { p: OpenAIRealtime; done: FinishedResponse[]; models: string[] } {
  const done: FinishedResponse[] = []
  const models: string[] = []
  const p = new OpenAIRealtime({ countTokens: (text) => text.split(' ').filter(Boolean).length, finished: (r) => done.push(r), model: (m) => models.push(m) })
  return { p, done, models }
}

/** Base64 of `bytes` bytes of silence. */
const audio = (bytes: number): string => Buffer.alloc(bytes).toString('base64')

for (const [generation, names] of [
  ['GA', { text: 'response.output_text.delta', audio: 'response.output_audio.delta', transcript: 'response.output_audio_transcript.delta' }],
  ['beta', { text: 'response.text.delta', audio: 'response.audio.delta', transcript: 'response.audio_transcript.delta' }],
] as const) {
  t.test(`a response the client asks for, with the ${generation} event names: TTFT, time to first audio, ITL, underrun, usage`, async (t) => {
    const { p, done, models } = protocol()
    p.server({ type: 'session.created', session: { model: 'gpt-realtime', output_audio_format: 'pcm16', audio: { output: { format: { type: 'audio/pcm', rate: 24000 } } } } }, 0)
    p.client({ type: 'response.create' }, 1000)
    t.equal(p.inFlight, 1)
    p.server({ type: 'response.created', response: { id: 'resp_1' } }, 1050)
    // 9600 bytes = 200 ms of PCM16 at 24 kHz.
    p.server({ type: names.audio, response_id: 'resp_1', delta: audio(9600) }, 1300)
    p.server({ type: names.transcript, response_id: 'resp_1', delta: 'hello there' }, 1310)
    p.server({ type: names.audio, response_id: 'resp_1', delta: audio(9600) }, 1700)
    p.server({ type: names.transcript, response_id: 'resp_1', delta: 'friend' }, 1710)
    p.server(
      {
        type: 'response.done',
        response: {
          id: 'resp_1',
          status: 'completed',
          usage: { input_tokens: 30, output_tokens: 50, input_token_details: { text_tokens: 10, audio_tokens: 20 }, output_token_details: { text_tokens: 3, audio_tokens: 47 } },
        },
      },
      1800,
    )
    t.same(models, ['gpt-realtime'])
    t.equal(done.length, 1)
    const r = done[0]
    t.equal(r.id, 'resp_1')
    t.equal(r.outcome, 'ok')
    t.ok(near(r.timing.ttft as number, 0.3))
    t.ok(near(r.timing.ttfa as number, 0.3))
    // Played 1300–1500; the next audio at 1700: 200 ms silent.
    t.ok(near(r.timing.underrun as number, 0.2))
    t.ok(near(r.timing.audioSeconds, 0.4))
    t.equal(r.timing.itl.length, 1)
    t.ok(near(r.timing.itl[0][0], 0.4) && r.timing.itl[0][1] === 1)
    t.same(r.usage, { inputText: 10, inputAudio: 20, outputText: 3, outputAudio: 47 })
    t.equal(p.inFlight, 0)
  })
}

t.test('a text response (output_text) counts its deltas’ tokens', async (t) => {
  const { p, done } = protocol()
  p.client({ type: 'response.create', response: { output_modalities: ['text'] } }, 0)
  p.server({ type: 'response.created', response: { id: 'r' } }, 10)
  p.server({ type: 'response.output_text.delta', response_id: 'r', delta: 'a b' }, 100)
  p.server({ type: 'response.output_text.delta', response_id: 'r', delta: 'c' }, 130)
  p.server({ type: 'response.done', response: { id: 'r', status: 'completed', usage: { input_tokens: 4, output_tokens: 3 } } }, 140)
  t.equal(done[0].timing.streamedTokens, 3)
  t.ok(near(done[0].timing.ttft as number, 0.1))
  t.equal(done[0].timing.ttfa, undefined)
  t.same(done[0].usage, { inputText: 4, inputAudio: 0, outputText: 3, outputAudio: 0 }, 'without details, a direction counts as text')
})

t.test('a response the server starts (voice activity detection) starts at input_audio_buffer.committed', async (t) => {
  const { p, done } = protocol()
  p.server({ type: 'input_audio_buffer.speech_stopped' }, 400)
  p.server({ type: 'input_audio_buffer.committed', item_id: 'item_1' }, 500)
  p.server({ type: 'response.created', response: { id: 'r' } }, 520)
  p.server({ type: 'response.output_audio.delta', response_id: 'r', delta: audio(4800) }, 900)
  p.server({ type: 'response.done', response: { id: 'r', status: 'completed' } }, 1000)
  t.ok(near(done[0].timing.ttft as number, 0.4))
})

t.test('a manual commit followed by response.create starts at the response.create; a later server response does not reuse the commit', async (t) => {
  const { p, done } = protocol()
  p.client({ type: 'input_audio_buffer.commit' }, 0)
  p.server({ type: 'input_audio_buffer.committed' }, 5)
  p.client({ type: 'response.create' }, 100)
  p.server({ type: 'response.created', response: { id: 'r1' } }, 110)
  p.server({ type: 'response.output_text.delta', response_id: 'r1', delta: 'x' }, 300)
  p.server({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, 310)
  p.server({ type: 'response.created', response: { id: 'r2' } }, 400)
  p.server({ type: 'response.output_text.delta', response_id: 'r2', delta: 'y' }, 450)
  p.server({ type: 'response.done', response: { id: 'r2', status: 'completed' } }, 460)
  t.ok(near(done[0].timing.ttft as number, 0.2))
  t.equal(done[1].timing.ttft, undefined, 'a response whose start the proxy never saw has no TTFT')
  t.equal(done[1].timing.textDeltas, 1)
})

t.test('outcomes: failed is an error, cancelled is cancelled, incomplete is ok; the reason is kept', async (t) => {
  const { p, done } = protocol()
  for (const [id, status, details] of [
    ['a', 'failed', { type: 'failed', error: { type: 'server_error', code: 'overloaded' } }],
    ['b', 'cancelled', { type: 'cancelled', reason: 'turn_detected' }],
    ['c', 'incomplete', { type: 'incomplete', reason: 'max_output_tokens' }],
  ] as const) {
    p.client({ type: 'response.create' }, 0)
    p.server({ type: 'response.created', response: { id } }, 1)
    p.server({ type: 'response.done', response: { id, status, status_details: details } }, 2)
  }
  t.same(
    done.map((r) => [r.outcome, r.detail]),
    [
      ['error', 'overloaded'],
      ['cancelled', 'turn_detected'],
      ['ok', 'max_output_tokens'],
    ],
  )
})

t.test('a response.create the server refuses with an error event is an errored response', async (t) => {
  const { p, done } = protocol()
  p.client({ type: 'response.create', event_id: 'evt_7' }, 0)
  p.server({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_value', event_id: 'evt_7' } }, 5)
  p.client({ type: 'response.create' }, 10)
  p.server({ type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', event_id: null } }, 12)
  p.client({ type: 'response.create' }, 20)
  p.server({ type: 'error', error: { type: 'invalid_request_error', code: 'unknown_parameter', event_id: 'someone_else' } }, 22)
  t.same(
    done.map((r) => [r.outcome, r.detail, r.start]),
    [
      ['error', 'invalid_value', 0],
      ['error', 'conversation_already_has_active_response', 10],
    ],
  )
  t.equal(p.inFlight, 1, 'an error about another event leaves the request waiting')
})

t.test('the session ends with responses open: the open ones and the unanswered requests end with the given outcome; a cancel the client asked for is cancelled', async (t) => {
  const { p, done } = protocol()
  p.client({ type: 'response.create' }, 0)
  p.server({ type: 'response.created', response: { id: 'r1' } }, 10)
  p.server({ type: 'response.output_text.delta', response_id: 'r1', delta: 'x' }, 20)
  p.client({ type: 'response.create', response: { conversation: 'none' } }, 30)
  p.server({ type: 'response.created', response: { id: 'r2' } }, 35)
  p.client({ type: 'response.cancel', response_id: 'r2' }, 36)
  p.client({ type: 'response.create', response: { conversation: 'none' } }, 40)
  p.end('error', 100)
  t.same(
    done.map((r) => [r.id, r.outcome]),
    [
      ['r1', 'error'],
      ['r2', 'cancelled'],
      [undefined, 'error'],
    ],
  )
  t.equal(p.inFlight, 0)
})

t.test('the output format decides the audio’s seconds: G.711 is 8,000 bytes a second', async (t) => {
  const { p, done } = protocol()
  p.server({ type: 'session.updated', session: { audio: { output: { format: { type: 'audio/pcmu' } } } } }, 0)
  p.client({ type: 'response.create' }, 0)
  p.server({ type: 'response.created', response: { id: 'r' } }, 1)
  p.server({ type: 'response.output_audio.delta', response_id: 'r', delta: audio(8000) }, 10)
  p.server({ type: 'response.done', response: { id: 'r', status: 'completed' } }, 20)
  p.server({ type: 'session.updated', session: { output_audio_format: 'pcm16' } }, 30)
  p.client({ type: 'response.create' }, 30)
  p.server({ type: 'response.created', response: { id: 's' } }, 31)
  p.server({ type: 'response.output_audio.delta', response_id: 's', delta: audio(8000) }, 40)
  p.server({ type: 'response.done', response: { id: 's', status: 'completed' } }, 50)
  t.ok(near(done[0].timing.audioSeconds, 1))
  t.ok(near(done[1].timing.audioSeconds, 1 / 6))
})

t.test('shapes it does not expect are ignored, never thrown on', async (t) => {
  const { p, done } = protocol()
  for (const bad of [
    { type: 'response.done' },
    { type: 'response.done', response: null },
    { type: 'response.created', response: 'x' },
    { type: 'response.output_audio.delta', delta: 7 },
    { type: 'response.output_text.delta', response_id: 3, delta: '' },
    { type: 'session.created', session: [] },
    { type: 'error', error: 'boom' },
    { type: 42 },
    {},
  ]) {
    p.server(bad, 1)
    p.client(bad, 1)
  }
  t.equal(done.length, 0)
})

t.test(
  'the responses in flight, for the cluster’s progress reports: one asked for and not begun with its start only, an open one with its timeline, the same object while it stays open',
  async (t) => {
    const { p } = protocol()
    const seen = (): [object, number | undefined, boolean][] => {
      const out: [object, number | undefined, boolean][] = []
      p.forEachInFlight((ref, start, timeline) => out.push([ref, start, timeline !== undefined]))
      return out
    }
    t.same(seen(), [], 'none')
    p.client({ type: 'response.create' }, 10)
    p.client({ type: 'response.create' }, 20)
    const asked = seen()
    t.same(
      asked.map(([, start, timed]) => [start, timed]),
      [
        [10, false],
        [20, false],
      ],
    )
    p.server({ type: 'response.created', response: { id: 'resp_1' } }, 30)
    p.server({ type: 'response.output_text.delta', response_id: 'resp_1', delta: 'hi' }, 40)
    const open = seen()
    t.same(
      open.map(([, start, timed]) => [start, timed]),
      [
        [10, true],
        [20, false],
      ],
      'the first begun (its start kept), the second still asked for',
    )
    t.equal(open[1][0], asked[1][0], 'the same object while it waits')
    p.server({ type: 'response.output_text.delta', response_id: 'resp_1', delta: 'there' }, 50)
    t.equal(seen()[0][0], open[0][0], 'and while it streams')
    p.server({ type: 'response.done', response: { id: 'resp_1', status: 'completed' } }, 60)
    t.equal(seen().length, 1, 'an ended one is not in flight')
  },
)
