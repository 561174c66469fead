import t from 'tap'
import { Opcode, closeFrame, encodeFrame } from '../../src/realtime/frame.ts'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import { RealtimeSession } from '../../src/realtime/session.ts'
import type { RealtimeDeps, SessionIdentity, SessionSummary } from '../../src/realtime/session.ts'
import type { RouteRuntime } from '../../src/proxy/exchange.ts'
import type { EncodingSelector } from '../../src/tokens/tokenizer.ts'

/** A session fed frames by hand: what it records. */
function session(provider: string, path: string, query = '', countTokens: (text: string) => number = (s) => s.split(' ').filter(Boolean).length) {
  const responses: FinishedResponse[] = []
  const sessions: { who: SessionIdentity; s: SessionSummary }[] = []
  const deps: RealtimeDeps = {
    encodings: { counterFor: () => countTokens } as unknown as EncodingSelector,
    maxMessageBytes: 1024 * 1024,
    sessions: new Set(),
    recordResponse: (_who, r) => responses.push(r),
    recordSession: (who, s) => sessions.push({ who, s }),
    onRecordError: () => {},
  }
  const route: RouteRuntime = { label: '/rt', prefix: '/rt', provider, inFlight: 0 }
  const s = new RealtimeSession(deps, route, 'id-1', path, new URLSearchParams(query), 0)
  s.opened(undefined)
  const fromServer = (event: unknown, at: number, binary = false): void => s.data('upstream', encodeFrame(binary ? Opcode.binary : Opcode.text, Buffer.from(JSON.stringify(event)), false), at)
  const fromClient = (event: unknown, at: number): void => s.data('client', encodeFrame(Opcode.text, Buffer.from(JSON.stringify(event)), true), at)
  return { s, deps, responses, sessions, fromServer, fromClient }
}

t.test('on a route with provider auto, the protocol and provider come from the path, else from the first message', async (t) => {
  const byPath = session('auto', '/v1/realtime', 'model=gpt-realtime')
  t.equal(byPath.s.provider, 'openai')
  t.equal(byPath.s.model, 'gpt-realtime', 'the model from the query')
  const gemini = session('auto', '/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent')
  t.equal(gemini.s.provider, 'gemini')
  const unknown = session('auto', '/socket')
  t.equal(unknown.s.provider, 'unknown')
  unknown.fromClient({ setup: { model: 'models/gemini-live' } }, 0)
  t.equal(unknown.s.provider, 'gemini', 'found from the setup message')
  t.equal(unknown.s.model, 'gemini-live', 'the model from the session')
  const azure = session('auto', '/openai/realtime', 'api-version=2025-04-01&deployment=my-voice')
  t.same([azure.s.provider, azure.s.model], ['openai', 'my-voice'], "Azure's deployment is the model")
})

t.test('Gemini Live messages in binary frames are read; the close frame and the ends are kept', async (t) => {
  const { s, responses, sessions, fromServer, fromClient } = session('gemini', '/ws/x.BidiGenerateContent')
  fromClient({ clientContent: { turnComplete: true } }, 100)
  fromServer({ serverContent: { modelTurn: { parts: [{ text: 'hello there' }] } } }, 300, true)
  fromServer({ serverContent: { turnComplete: true }, usageMetadata: { promptTokenCount: 3, responseTokenCount: 2 } }, 310, true)
  t.equal(responses.length, 1)
  t.equal(responses[0].timing.ttft, 0.2)
  s.data('client', closeFrame(1000, 'done', true), 400)
  s.closed({ first: 'upstream', abrupt: false }, 500)
  t.equal(sessions.length, 1)
  t.match(sessions[0].s, { outcome: 'ok', responses: 1, close: { from: 'client', code: 1000, reason: 'done' }, messagesFromClient: 1, messagesFromUpstream: 2, unread: 0 })
  t.equal(sessions[0].s.duration, 0.5)
})

t.test('a message that is not JSON is counted as unread; non-JSON binary is ignored', async (t) => {
  const { s, sessions } = session('openai', '/v1/realtime')
  s.data('upstream', encodeFrame(Opcode.text, Buffer.from('{not json'), false), 1)
  s.data('upstream', encodeFrame(Opcode.binary, Buffer.from([1, 2, 3]), false), 2)
  s.closed({ first: 'client', abrupt: true }, 3)
  t.match(sessions[0].s, { unread: 1, messagesFromUpstream: 2, outcome: 'cancelled' })
})

t.test('a bug in measuring costs the session its figures, never the relay: data() does not throw', async (t) => {
  const { s, sessions, fromServer, fromClient } = session('openai', '/v1/realtime', '', () => {
    throw new Error('tokenizer exploded')
  })
  fromClient({ type: 'response.create' }, 0)
  fromServer({ type: 'response.created', response: { id: 'r' } }, 1)
  t.doesNotThrow(() => fromServer({ type: 'response.output_text.delta', response_id: 'r', delta: 'boom' }, 2))
  t.doesNotThrow(() => fromServer({ type: 'response.output_text.delta', response_id: 'r', delta: 'again' }, 3))
  s.closed({ first: 'upstream', abrupt: false }, 4)
  t.equal(sessions[0].s.parseError, 'measuring failed: tokenizer exploded')
})

t.test('the session leaves the open set once, when it finishes', async (t) => {
  const { s, deps, sessions } = session('openai', '/v1/realtime')
  t.equal(deps.sessions.size, 1)
  s.finish(10, { first: 'client', abrupt: false })
  s.finish(20, { first: 'client', abrupt: false })
  t.equal(deps.sessions.size, 0)
  t.equal(sessions.length, 1)
})
