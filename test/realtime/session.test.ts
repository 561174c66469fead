import { randomBytes } from 'node:crypto'
import { constants, deflateRawSync } from 'node:zlib'
import t from 'tap'
import { Opcode, closeFrame, encodeFrame } from '../../src/realtime/frame.ts'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import { RealtimeSession } from '../../src/realtime/session.ts'
import { MAX_DEPTH, MAX_OBJECT_KEYS } from '../../src/realtime/stepped-json.ts'
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

/** A session with permessage-deflate agreed (no context takeover), fed compressed frames by hand. */
function deflateSession(maxMessageBytes = 1024 * 1024, countTokens: (s: string) => number = (s) => s.split(' ').filter(Boolean).length) {
  const responses: FinishedResponse[] = []
  const sessions: SessionSummary[] = []
  const deps: RealtimeDeps = {
    encodings: { counterFor: () => countTokens } as unknown as EncodingSelector,
    maxMessageBytes,
    sessions: new Set(),
    recordResponse: (_who, r) => responses.push(r),
    recordSession: (_who, s) => sessions.push(s),
    onRecordError: () => {},
  }
  const route: RouteRuntime = { label: '/rt', prefix: '/rt', provider: 'openai', inFlight: 0 }
  const s = new RealtimeSession(deps, route, 'id-z', '/v1/realtime', new URLSearchParams(), 0)
  s.opened({ serverNoContextTakeover: true, clientNoContextTakeover: true })
  const frame = (event: unknown, masked: boolean): Buffer => {
    const all = deflateRawSync(Buffer.from(JSON.stringify(event)), { finishFlush: constants.Z_SYNC_FLUSH })
    const f = encodeFrame(Opcode.text, all.subarray(0, all.length - 4), masked)
    f[0] |= 0x40
    return f
  }
  return { s, responses, sessions, frame }
}

/** More small compressed messages than one turn inflates (each counts 2 KiB of a turn's 128 KiB). */
const DELTAS = 150
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

t.test('compressed messages past one turn’s inflate budget wait, in order and with their arrival times, for the next turns', async (t) => {
  const { s, responses, frame } = deflateSession()
  s.data('client', frame({ type: 'response.create' }, true), 100)
  const deltas = Array.from({ length: DELTAS }, () => frame({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word' }, false))
  s.data(
    'upstream',
    Buffer.concat([frame({ type: 'response.created', response: { id: 'r1' } }, false), ...deltas, frame({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, false)]),
    250,
  )
  t.equal(responses.length, 0, 'not all read in the turn they came in')
  t.ok(s.held > 0, 'the waiting messages count as held')
  let turns = 0
  while (responses.length === 0) {
    await nextTurn()
    turns++
  }
  t.ok(turns >= 2, `read over ${turns} more turns`)
  t.equal(s.held, 0)
  const r = responses[0]
  t.equal(r.timing.ttft, 0.15, 'the first delta keeps the time of its read')
  t.equal(r.timing.textDeltas, DELTAS)
  t.equal(r.outcome, 'ok')
})

t.test('a session whose connections close while messages wait finishes once they are read', async (t) => {
  const { s, responses, sessions, frame } = deflateSession()
  s.data('client', frame({ type: 'response.create' }, true), 100)
  const deltas = Array.from({ length: DELTAS }, () => frame({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word' }, false))
  s.data(
    'upstream',
    Buffer.concat([frame({ type: 'response.created', response: { id: 'r1' } }, false), ...deltas, frame({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, false)]),
    250,
  )
  s.closed({ first: 'client', abrupt: false }, 300)
  t.equal(sessions.length, 0, 'not yet recorded')
  while (sessions.length === 0) await nextTurn()
  t.equal(responses.length, 1)
  t.match(sessions[0], { responses: 1, unread: 0, parseError: undefined, duration: 0.3 })
})

t.test('messages waiting past twice the message limit: the session is measured no more, says why, and counts them unread', async (t) => {
  const { s, sessions, frame } = deflateSession(4096)
  const many = Array.from({ length: 300 }, (_, i) => frame({ type: 'input_audio_buffer.append', audio: `${i}` }, true))
  s.data('client', Buffer.concat(many), 10)
  await nextTurn()
  s.data('client', frame({ type: 'response.create' }, true), 20)
  s.closed({ first: 'client', abrupt: false }, 30)
  t.equal(sessions.length, 1)
  t.match(sessions[0].parseError, /^inflate budget: messages waiting to be read over 8192 bytes/)
  t.ok(sessions[0].unread > 0 && sessions[0].unread < 300, `${sessions[0].unread} messages unread`)
  t.equal(sessions[0].messagesFromClient, 300, 'the later message was not decoded')
})

t.test('a session that finishes while messages wait (the upgrade path) counts them unread and reads no more', async (t) => {
  const { s, sessions, responses, frame } = deflateSession()
  const deltas = Array.from({ length: DELTAS }, () => frame({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word' }, false))
  s.data('upstream', Buffer.concat(deltas), 10)
  s.finish(20)
  await nextTurn()
  t.equal(sessions.length, 1)
  t.ok(sessions[0].unread > 0, `${sessions[0].unread} unread`)
  t.equal(responses.length, 1, 'the open response ends with the session')
  t.equal(responses[0].timing.textDeltas, DELTAS - sessions[0].unread)
})

t.test('a bug in measuring a message that waited costs the session its figures, in a later turn, and throws nowhere', async (t) => {
  const { s, sessions, frame } = deflateSession(1024 * 1024, () => {
    throw new Error('tokenizer bug')
  })
  const deltas = Array.from({ length: DELTAS }, () => frame({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word' }, false))
  // A turn's worth of messages first, so the deltas wait for a later turn.
  const fillers = Array.from({ length: 100 }, () => frame({ type: 'rate_limits.updated' }, false))
  s.data('upstream', Buffer.concat([...fillers, frame({ type: 'response.created', response: { id: 'r1' } }, false), ...deltas]), 10)
  t.equal(s.held > 0, true, 'the deltas wait')
  await nextTurn()
  s.closed({ first: 'client', abrupt: false }, 20)
  t.equal(sessions.length, 1)
  t.equal(sessions[0].parseError, 'measuring failed: tokenizer bug')
})

t.test('a compressed message larger than a turn’s inflate budget is read over several turns, with its arrival time, and those behind it wait', async (t) => {
  const { s, responses, frame } = deflateSession()
  s.data('client', frame({ type: 'response.create' }, true), 100)
  const audio = randomBytes(360 * 1024).toString('base64')
  s.data(
    'upstream',
    Buffer.concat([
      frame({ type: 'response.created', response: { id: 'r1' } }, false),
      frame({ type: 'response.output_audio.delta', response_id: 'r1', delta: audio }, false),
      frame({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word' }, false),
      frame({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, false),
    ]),
    250,
  )
  t.ok(s.held > 360 * 1024, 'the message being inflated and those behind it are held')
  let turns = 0
  while (responses.length === 0) {
    await nextTurn()
    turns++
  }
  t.ok(turns >= 3, `read over ${turns} more turns`)
  t.equal(s.held, 0)
  const r = responses[0]
  t.equal(r.timing.ttft, 0.15, 'the audio delta keeps the time of its read')
  t.equal(r.timing.audioSeconds, (360 * 1024) / 48_000)
  t.equal(r.timing.textDeltas, 1)
  t.equal(r.outcome, 'ok')
})

t.test('a large inflated message is parsed over turns too: its text read exactly, a broken one unread, and those behind it read in order', async (t) => {
  const counted: string[] = []
  const { s, responses, sessions, frame } = deflateSession(1024 * 1024, (text) => {
    counted.push(text)
    return 1
  })
  s.data('client', frame({ type: 'response.create' }, true), 100)
  // About 300 KiB of words with escapes and characters of every UTF-8 length.
  const text = Array.from({ length: 30_000 }, (_, i) => ['a\\"b', 'é€', '😀\n', 'tab\t'][i % 4]).join(' ')
  const broken = Buffer.from(JSON.stringify({ type: 'response.output_text.delta', response_id: 'r1', delta: text }).replace(/}$/, ','))
  const brokenFrame = (() => {
    const all = deflateRawSync(broken, { finishFlush: constants.Z_SYNC_FLUSH })
    const f = encodeFrame(Opcode.text, all.subarray(0, all.length - 4), false)
    f[0] |= 0x40
    return f
  })()
  s.data(
    'upstream',
    Buffer.concat([
      frame({ type: 'response.created', response: { id: 'r1' } }, false),
      frame({ type: 'response.output_text.delta', response_id: 'r1', delta: text }, false),
      brokenFrame,
      frame({ type: 'response.output_text.delta', response_id: 'r1', delta: 'last' }, false),
      frame({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, false),
    ]),
    250,
  )
  let turns = 0
  while (responses.length === 0) {
    await nextTurn()
    turns++
    if (turns === 1) t.ok(s.held > text.length, 'the message being parsed is held')
  }
  t.ok(turns >= 4, `read over ${turns} more turns`)
  t.equal(s.held, 0)
  t.equal(responses[0].timing.textDeltas, 2)
  t.same(counted, [text, 'last'], 'the large delta’s text is exactly the one sent, then the last delta’s')
  s.closed({ first: 'client', abrupt: false }, 300)
  t.match(sessions[0], { unread: 1, parseError: undefined, messagesFromUpstream: 5 })
})

t.test('an uncompressed message whose parse fits a turn but not what is left of this one is parsed whole at the next turn’s start, keeping its arrival time', async (t) => {
  const { s, responses, fromServer } = session('openai', '/v1/realtime')
  const append = encodeFrame(Opcode.text, Buffer.from(JSON.stringify({ type: 'input_audio_buffer.append', audio: 'A'.repeat(100 * 1024) })), true)
  // 250 keys: about 3 KB, costing 51 KB of a turn's room in all (192 a key); 28 KB are left after the append.
  const pad = Object.fromEntries(Array.from({ length: 250 }, (_, i) => [`k${i}`, i]))
  const create = encodeFrame(Opcode.text, Buffer.from(JSON.stringify({ type: 'response.create', response: { metadata: pad } })), true)
  s.data('client', Buffer.concat([append, create]), 100)
  t.ok(s.held >= create.length - 8, 'the response.create waits for the next turn')
  fromServer({ type: 'response.created', response: { id: 'r1' } }, 200)
  fromServer({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word' }, 250)
  fromServer({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, 300)
  t.equal(responses.length, 0, 'the upstream’s messages wait behind it')
  await nextTurn()
  t.equal(s.held, 0, 'read in one more turn')
  t.equal(responses.length, 1)
  t.equal(responses[0].timing.ttft, 0.15, 'from the response.create’s own read')
})

t.test('each uncompressed message costs the turn its reading too: 200 tiny text deltas in one read take two turns, in order, each with its read’s time', async (t) => {
  const { s, responses, fromServer, fromClient } = session('openai', '/v1/realtime')
  fromClient({ type: 'response.create' }, 100)
  fromServer({ type: 'response.created', response: { id: 'r1' } }, 200)
  const delta = encodeFrame(Opcode.text, Buffer.from(JSON.stringify({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word' })), false)
  const done = encodeFrame(Opcode.text, Buffer.from(JSON.stringify({ type: 'response.done', response: { id: 'r1', status: 'completed' } })), false)
  // Parsing alone (bytes and separators), 200 deltas cost about 52 KB of a turn's 128 KiB; with
  // reading what each says (512) and their three keys (128 each), about 232 KB.
  s.data('upstream', Buffer.concat([...Array.from({ length: 200 }, () => delta), done]), 250)
  t.equal(responses.length, 0, 'not all read in the turn they came in')
  t.ok(s.held > 0, 'the rest of the read waits')
  await nextTurn()
  t.equal(s.held, 0, 'read in one more turn')
  t.equal(responses.length, 1)
  t.equal(responses[0].timing.textDeltas, 200)
  t.equal(responses[0].timing.ttft, 0.15, 'the first delta keeps the time of its read')
})

t.test('a small compressed message of tiny tokens is parsed in steps from a copy: another session inflating meanwhile changes nothing', async (t) => {
  const counted: string[] = []
  const one = deflateSession(1024 * 1024, (text) => {
    counted.push(text)
    return 1
  })
  const other = deflateSession()
  const pad = Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`k${i}`, i]))
  one.s.data('upstream', one.frame({ type: 'response.created', response: { id: 'r1' } }, false), 10)
  one.s.data('upstream', one.frame({ type: 'response.output_text.delta', response_id: 'r1', pad, delta: 'exact words' }, false), 20)
  t.ok(one.s.held > 0, 'parsing in steps')
  let turns = 0
  while (one.s.held > 0) {
    other.s.data('upstream', other.frame({ type: 'response.output_text.delta', response_id: 'r9', delta: 'z'.repeat(30_000) }, false), 30)
    await nextTurn()
    turns++
  }
  t.ok(turns >= 2, `read over ${turns} turns`)
  t.same(counted, ['exact words'], 'the text sent, though the shared output was written over')
})

t.test('a session that finishes while a large message is half parsed counts it unread', async (t) => {
  const { s, sessions, frame } = deflateSession()
  s.data('upstream', frame({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word '.repeat(100_000) }, false), 10)
  while (s.held > 400_000) await nextTurn()
  t.ok(s.held > 0, 'parsing, not yet read')
  s.finish(30)
  t.equal(s.held, 0)
  t.match(sessions[0], { unread: 1, messagesFromUpstream: 1 })
})

t.test('a read of thousands of tiny compressed frames is decoded a turn’s budget at a time: every message read, in order, with its read’s time', async (t) => {
  const { s, responses, sessions, frame } = deflateSession()
  s.data('client', frame({ type: 'response.create' }, true), 100)
  const deltas = Array.from({ length: 3000 }, () => frame({ type: 'response.output_text.delta', response_id: 'r1', delta: 'word' }, false))
  s.data('upstream', Buffer.concat([frame({ type: 'response.created', response: { id: 'r1' } }, false), ...deltas.slice(0, 1500)]), 250)
  s.data('upstream', Buffer.concat([...deltas.slice(1500), frame({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, false)]), 400)
  s.closed({ first: 'client', abrupt: false }, 500)
  // Each compressed message counts 2 KiB of a turn's 128 KiB: about 64 a turn.
  let turns = 0
  while (sessions.length === 0) {
    await nextTurn()
    turns++
  }
  t.ok(turns >= 3002 / 64, `read over ${turns} turns`)
  t.equal(responses.length, 1)
  t.equal(responses[0].timing.textDeltas, 3000)
  t.equal(responses[0].timing.ttft, 0.15, 'the first delta keeps the time of its read')
  t.equal(responses[0].end, 400, 'the last message keeps the time of its own read')
  t.match(sessions[0], { messagesFromUpstream: 3002, unread: 0, parseError: undefined })
})

t.test('a session behind on measuring, or measured no more, still knows where each direction’s frames end (the proxy’s own close frame goes there)', async (t) => {
  const { s, sessions, frame } = deflateSession(4096)
  const many = Buffer.concat(Array.from({ length: 300 }, (_, i) => frame({ type: 'input_audio_buffer.append', audio: `${i}` }, true)))
  s.data('client', many.subarray(0, 5000), 10)
  t.equal(s.atFrameBoundary('upstream'), false, 'mid-frame')
  s.data('client', many.subarray(5000), 20)
  t.equal(s.atFrameBoundary('upstream'), true, 'between frames, though not all decoded')
  const big = frame({ type: 'input_audio_buffer.append', audio: randomBytes(20_000).toString('base64') }, true)
  s.data('client', big.subarray(0, 100), 30)
  t.equal(s.atFrameBoundary('upstream'), false, 'mid-frame again')
  s.data('client', big.subarray(100), 40)
  t.equal(s.atFrameBoundary('upstream'), true)
  s.closed({ first: 'client', abrupt: false }, 50)
  t.match(sessions[0].parseError, /^inflate budget/)
  t.equal(sessions[0].messagesFromClient, 300, 'the messages let go undecoded are counted, from their headers')
  t.ok(sessions[0].unread > 200 && sessions[0].unread < 300, `${sessions[0].unread} unread: those not decoded when it stopped`)
})

t.test('a session that finishes while a message is half inflated counts it unread', async (t) => {
  const { s, sessions, frame } = deflateSession()
  s.data('upstream', frame({ type: 'response.output_audio.delta', response_id: 'r1', delta: randomBytes(360 * 1024).toString('base64') }, false), 10)
  t.ok(s.held > 0)
  s.closed({ first: 'upstream', abrupt: true }, 20)
  t.equal(sessions.length, 0, 'not yet recorded: it waits for the message')
  s.finish(30)
  t.equal(s.held, 0)
  t.match(sessions[0], { unread: 1, messagesFromUpstream: 1 })
})

t.test('a compressed frame on a session that agreed no compression is counted unread, not inflated', async (t) => {
  const { s, sessions } = session('openai', '/v1/realtime')
  const all = deflateRawSync(Buffer.from('{"type":"response.create"}'), { finishFlush: constants.Z_SYNC_FLUSH })
  const f = encodeFrame(Opcode.text, all.subarray(0, all.length - 4), true)
  f[0] |= 0x40
  s.data('client', f, 1)
  s.closed({ first: 'client', abrupt: false }, 2)
  t.match(sessions[0].s, { unread: 1, messagesFromClient: 1, responses: 0 })
})

t.test('a message with an object of more keys than MAX_OBJECT_KEYS is counted unread, its bytes not measured, and the messages after it are read exactly', async (t) => {
  for (const keys of [MAX_OBJECT_KEYS, MAX_OBJECT_KEYS + 1]) {
    const counted: string[] = []
    const { s, responses, sessions, fromServer, fromClient } = session('openai', '/v1/realtime', '', (text) => {
      counted.push(text)
      return 1
    })
    const pad = Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, i]))
    fromClient({ type: 'response.create' }, 50)
    fromServer({ type: 'response.created', response: { id: 'r1' } }, 100)
    fromServer({ type: 'response.output_text.delta', response_id: 'r1', pad, delta: 'padded' }, 150)
    fromServer({ type: 'response.output_text.delta', response_id: 'r1', delta: 'after é😀' }, 200)
    fromServer({ type: 'response.output_text.delta', response_id: 'r1', delta: 'last' }, 250)
    fromServer({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, 300)
    t.ok(s.held > 0, `${keys} keys: read in steps`)
    while (responses.length === 0) await nextTurn()
    const over = keys > MAX_OBJECT_KEYS
    t.same(counted, over ? ['after é😀', 'last'] : ['padded', 'after é😀', 'last'], `${keys} keys: the deltas read are exactly those sent`)
    t.equal(responses[0].timing.textDeltas, over ? 2 : 3)
    t.equal(responses[0].timing.ttft, over ? 0.15 : 0.1, 'the first delta read keeps its own arrival time')
    s.closed({ first: 'client', abrupt: false }, 400)
    t.match(sessions[0].s, { unread: over ? 1 : 0, parseError: undefined, messagesFromUpstream: 5 })
  }
})

t.test('a message nesting deeper than MAX_DEPTH is counted unread, its bytes not measured, and the messages after it are read exactly', async (t) => {
  for (const depth of [MAX_DEPTH - 1, MAX_DEPTH]) {
    const counted: string[] = []
    const { s, responses, sessions, fromServer, fromClient } = session('openai', '/v1/realtime', '', (text) => {
      counted.push(text)
      return 1
    })
    // The delta object itself is one level: its pad nests `depth` more.
    let pad: unknown = []
    for (let i = 1; i < depth; i++) pad = [pad]
    fromClient({ type: 'response.create' }, 50)
    fromServer({ type: 'response.created', response: { id: 'r1' } }, 100)
    fromServer({ type: 'response.output_text.delta', response_id: 'r1', pad, delta: 'padded' }, 150)
    fromServer({ type: 'response.output_text.delta', response_id: 'r1', delta: 'after' }, 200)
    fromServer({ type: 'response.done', response: { id: 'r1', status: 'completed' } }, 300)
    t.ok(s.held > 0, `${depth + 1} levels: read in steps`)
    while (responses.length === 0) await nextTurn()
    const over = depth + 1 > MAX_DEPTH
    t.same(counted, over ? ['after'] : ['padded', 'after'], `${depth + 1} levels: the deltas read are exactly those sent`)
    s.closed({ first: 'client', abrupt: false }, 400)
    t.match(sessions[0].s, { unread: over ? 1 : 0, parseError: undefined, messagesFromUpstream: 4 })
  }
})

t.test('a turn gathers at most 128 KiB of payload: a message of 1 MiB in one read is gathered over eight turns, relayed meanwhile, and read once whole', async (t) => {
  const { s, sessions, fromClient } = session('openai', '/v1/realtime')
  const text = JSON.stringify({ type: 'input_audio_buffer.append', audio: 'A'.repeat(1024 * 1024 - 200) })
  // Gathering a payload into its message costs about 1.8 ns a byte (a fresh buffer's pages): a
  // turn that caught up on a backlog gathered up to the message limit at once, 1.5–2 ms.
  s.data('client', encodeFrame(Opcode.text, Buffer.from(text), true), 100)
  let turns = 1
  while (s.held > Buffer.byteLength(text)) {
    await nextTurn()
    turns++
  }
  t.equal(turns, 8, 'eight turns of 128 KiB')
  // The message read, its parse goes on in steps; a message after it waits its turn.
  fromClient({ type: 'response.create' }, 200)
  while (s.held > 0) await nextTurn()
  s.closed({ first: 'client', abrupt: false }, 300)
  t.match(sessions[0].s, { messagesFromClient: 2, unread: 0, parseError: undefined })
})
