import { randomBytes } from 'node:crypto'
import t from 'tap'
import { CloseCode, Opcode, closeFrame, encodeFrame } from '../../src/realtime/frame.ts'
import { FrameBoundary, FrameDecoder } from '../../src/realtime/frame-decoder.ts'

interface Seen {
  messages: { opcode: number; text: string | undefined; compressed: boolean; size: number }[]
  closes: { code: number | undefined; reason: string }[]
}

function decoder(max = 1024): { d: FrameDecoder; seen: Seen } {
  const seen: Seen = { messages: [], closes: [] }
  const d = new FrameDecoder(
    {
      message: (opcode, payload, compressed, size) => {
        seen.messages.push({ opcode, text: payload?.toString('utf8'), compressed, size })
        return undefined
      },
      close: (code, reason) => seen.closes.push({ code, reason }),
    },
    max,
  )
  return { d, seen }
}

/** A frame with explicit FIN, RSV1 and opcode (encodeFrame always sets FIN). */
function frame(opcode: number, payload: string, { fin = true, rsv1 = false, masked = false } = {}): Buffer {
  const f = encodeFrame(opcode, Buffer.from(payload, 'utf8'), masked)
  f[0] = (fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | opcode
  return f
}

t.test('a stream of frames gives the same messages at every split, masked or not', async (t) => {
  for (const masked of [false, true]) {
    const stream = Buffer.concat([
      frame(Opcode.text, '{"type":"a"}', { masked }),
      frame(Opcode.text, 'part one ', { fin: false, masked }),
      frame(Opcode.ping, 'ping!', { masked }),
      frame(Opcode.continuation, 'and two', { masked }),
      frame(Opcode.binary, 'x'.repeat(300), { masked }),
      frame(Opcode.text, 'y'.repeat(70_000), { masked }),
      closeFrame(4001, 'bye', masked),
    ])
    const whole = decoder(100_000)
    whole.d.push(stream)
    t.same(
      whole.seen.messages.map((m) => [m.opcode, m.text?.length, m.size]),
      [
        [Opcode.text, 12, 12],
        [Opcode.text, 16, 16],
        [Opcode.binary, 300, 300],
        [Opcode.text, 70_000, 70_000],
      ],
    )
    t.equal(whole.seen.messages[1].text, 'part one and two', 'fragments are joined, the ping between them set aside')
    t.same(whole.seen.closes, [{ code: 4001, reason: 'bye' }])
    let same = true
    for (let at = 1; at < stream.length; at += at < 200 ? 1 : 997) {
      const split = decoder(100_000)
      split.d.push(stream.subarray(0, at))
      split.d.push(stream.subarray(at))
      same &&= JSON.stringify(split.seen) === JSON.stringify(whole.seen)
    }
    t.ok(same, `every split gives the same messages (${masked ? 'masked' : 'unmasked'})`)
  }
})

t.test('the chunks given are never changed (the relay may still be writing them)', async (t) => {
  const f = frame(Opcode.text, 'hello', { masked: true })
  const copy = Buffer.from(f)
  decoder().d.push(f)
  t.same(f, copy)
})

t.test('a message over the limit is skipped as it passes, and only its size is reported', async (t) => {
  const { d, seen } = decoder(1000)
  d.push(frame(Opcode.text, 'a'.repeat(600), { fin: false }))
  t.equal(d.held, 600)
  d.push(frame(Opcode.continuation, 'b'.repeat(600), { fin: false }))
  t.equal(d.held, 0, 'what was held is let go once the message is over the limit')
  d.push(frame(Opcode.continuation, 'c', { fin: true }))
  d.push(frame(Opcode.text, 'next'))
  t.same(seen.messages, [
    { opcode: Opcode.text, text: undefined, compressed: false, size: 1201 },
    { opcode: Opcode.text, text: 'next', compressed: false, size: 4 },
  ])
})

t.test('a message fragmented forever holds no more than the limit', async (t) => {
  const { d, seen } = decoder(4096)
  d.push(frame(Opcode.text, 'x', { fin: false }))
  let most = 0
  for (let i = 0; i < 10_000; i++) {
    d.push(frame(Opcode.continuation, 'y'.repeat(100), { fin: false }))
    most = Math.max(most, d.held)
  }
  t.ok(most <= 4096, `held at most ${most} bytes`)
  t.equal(seen.messages.length, 0)
  t.equal(d.failure, undefined)
})

t.test('a frame announcing 2^62 bytes is skipped as it passes; one over 2^53 stops decoding', async (t) => {
  const { d, seen } = decoder(1024)
  const head = Buffer.from([0x82, 127, 0, 0, 1, 0, 0, 0, 0, 0])
  d.push(head)
  for (let i = 0; i < 100; i++) d.push(Buffer.alloc(65_536))
  t.equal(d.held, 0)
  t.equal(seen.messages.length, 0)
  t.equal(d.failure, undefined)
  const huge = decoder(1024)
  huge.d.push(Buffer.from([0x82, 127, 0x40, 0, 0, 0, 0, 0, 0, 0]))
  t.equal(huge.d.failure, 'a frame length over 2^53')
})

t.test('bytes that are not WebSocket frames stop decoding (and say why); nothing throws', async (t) => {
  const cases: [string, Buffer][] = [
    ['reserved opcode 3', Buffer.from([0x83, 0])],
    ['reserved opcode 11', Buffer.from([0x8b, 0])],
    ['RSV2 or RSV3 set', Buffer.from([0xa1, 0])],
    ['a fragmented or oversized control frame', Buffer.from([0x89, 126, 0, 200])],
    ['a fragmented or oversized control frame', Buffer.from([0x09, 0])],
    ['a continuation frame with no message to continue', Buffer.from([0x80, 0])],
    ['a new message inside a fragmented one', Buffer.concat([frame(Opcode.text, 'a', { fin: false }), frame(Opcode.text, 'b')])],
  ]
  for (const [reason, bytes] of cases) {
    const { d, seen } = decoder()
    d.push(bytes)
    d.push(frame(Opcode.text, 'after'))
    t.equal(d.failure, reason)
    t.equal(seen.messages.length, 0, `nothing more is read after: ${reason}`)
  }
})

t.test('RSV1 marks a compressed message; a close without a code has none; the boundary is known', async (t) => {
  const { d, seen } = decoder()
  t.ok(d.atBoundary)
  const f = frame(Opcode.text, 'zz', { rsv1: true })
  d.push(f.subarray(0, 3))
  t.notOk(d.atBoundary)
  d.push(f.subarray(3))
  t.ok(d.atBoundary)
  d.push(encodeFrame(Opcode.close, Buffer.alloc(0), true))
  t.same(seen.messages, [{ opcode: Opcode.text, text: 'zz', compressed: true, size: 2 }])
  t.same(seen.closes, [{ code: undefined, reason: '' }])
})

t.test('the proxy’s own close frames: code, reason cut to fit a control frame, masked toward the upstream', async (t) => {
  const { d, seen } = decoder()
  const long = closeFrame(CloseCode.goingAway, 'r'.repeat(500), true)
  t.equal(long[1] & 0x80, 0x80, 'masked')
  t.equal(long[1] & 0x7f, 125, 'a control frame of at most 125 bytes')
  d.push(long)
  t.equal(seen.closes[0].code, 1001)
  t.equal(seen.closes[0].reason.length, 123)
})

t.test('a message of 100,000 one-byte frames, masked, read a frame at a time: one buffer held, at most the limit, and the message whole', async (t) => {
  const { d, seen } = decoder(200_000)
  let most = 0
  d.push(frame(Opcode.text, 'a', { fin: false, masked: true }))
  for (let i = 1; i < 100_000; i++) {
    d.push(frame(Opcode.continuation, 'a', { fin: i === 99_999, masked: true }))
    most = Math.max(most, d.held)
  }
  t.ok(most <= 200_000 && most >= 99_999, `held at most ${most} bytes`)
  t.equal(d.held, 0, 'nothing once the message was handed over')
  t.same(
    seen.messages.map((m) => [m.text?.length, m.size]),
    [[100_000, 100_000]],
  )
  t.equal(seen.messages[0].text, 'a'.repeat(100_000))
})

t.test('a masked payload unmasks to its bytes however reads cut it (mask phase and word alignment)', async (t) => {
  const payload = randomBytes(5000)
  const frames = [encodeFrame(Opcode.binary, payload, true), encodeFrame(Opcode.binary, payload.subarray(0, 300), true), encodeFrame(Opcode.text, Buffer.alloc(0), true)]
  const stream = Buffer.concat(frames)
  const wrong: number[] = []
  for (let at = 1; at < 40; at++) {
    const got: Buffer[] = []
    const d = new FrameDecoder(
      {
        message: (_o, p) => {
          got.push(Buffer.from(p ?? Buffer.alloc(0)))
          return undefined
        },
        close: () => {},
      },
      10_000,
    )
    // The second piece starts at every offset from a word boundary in its own Buffer.
    const rest = Buffer.alloc(stream.length - at + 8).subarray(at % 8)
    stream.copy(rest, 0, at)
    d.push(stream.subarray(0, at))
    for (let i = 0; i < rest.length; i += 1000 + at) d.push(rest.subarray(i, i + 1000 + at))
    if (!(got.length === 3 && got[0].equals(payload) && got[1].equals(payload.subarray(0, 300)) && got[2].length === 0)) wrong.push(at)
  }
  t.same(wrong, [], 'every cut reads back the payload')
})

t.test('the boundary walker knows, from the headers alone, where frames end and how many data messages ended, at every split', async (t) => {
  const stream = Buffer.concat([
    frame(Opcode.text, '{"type":"a"}', { masked: true }),
    frame(Opcode.text, 'part one ', { fin: false, masked: true }),
    frame(Opcode.ping, 'ping!', { masked: true }),
    frame(Opcode.continuation, 'and two', { masked: true }),
    frame(Opcode.binary, '', { masked: false }),
    frame(Opcode.text, 'y'.repeat(70_000), { masked: false }),
    closeFrame(4001, 'bye', true),
  ])
  const ends = new Set<number>()
  const d = decoder(100_000)
  for (let at = 0; at < stream.length; at++) {
    d.d.push(stream.subarray(at, at + 1))
    if (d.d.atBoundary) ends.add(at + 1)
  }
  let same = true
  for (let at = 1; at < stream.length; at += at < 300 ? 1 : 499) {
    const w = new FrameBoundary()
    w.push(stream.subarray(0, at))
    same &&= w.atBoundary === ends.has(at)
    w.push(stream.subarray(at))
    same &&= w.atBoundary && w.messages === 4
  }
  t.ok(same, 'at a boundary exactly where the decoder is, and four messages once all came')
  const w = new FrameBoundary()
  t.equal(w.atBoundary, true)
  w.push(stream.subarray(0, 3))
  t.same([w.atBoundary, w.messages], [false, 0], 'inside the first header')
})

t.test('a sink that says stop ends the push after that message; pushing again from there gives the rest', async (t) => {
  const stream = Buffer.concat(['a', 'b', 'c', 'd'].map((x) => frame(Opcode.text, x, { masked: true })))
  const got: string[] = []
  const d = new FrameDecoder(
    {
      message: (_o, p) => {
        got.push(p?.toString() ?? '')
        return got.length % 2 === 1 ? undefined : false
      },
      close: () => {},
    },
    100,
  )
  const first = d.push(stream)
  t.same(got, ['a', 'b'])
  t.equal(first, stream.length / 2)
  t.equal(d.push(stream, first), stream.length)
  t.same(got, ['a', 'b', 'c', 'd'])
})

t.test('a push gathers at most its room of payload bytes, stopping inside a frame; pushing again from there gives the message whole', async (t) => {
  const payload = randomBytes(10_000).toString('base64')
  const over = 'x'.repeat(2000)
  const stream = Buffer.concat([frame(Opcode.text, over, { masked: true }), frame(Opcode.text, payload, { masked: true }), frame(Opcode.ping, 'p')])
  const { d, seen } = decoder(13_400)
  const stops: number[] = []
  const gathered: number[] = []
  for (let at = 0; at < stream.length; ) {
    at = d.push(stream, at, 4096)
    stops.push(at)
    gathered.push(d.gathered)
  }
  // The first message (2,000 bytes) and 2,096 of the second; then 4,096 twice; the rest, with the ping.
  t.same(gathered, [4096, 4096, 4096, 3048])
  t.equal(stops.length, 4)
  t.same(
    seen.messages.map((m) => m.text),
    [over, payload],
  )
  // A payload over the limit only passes: it costs no room.
  const big = decoder(100)
  t.equal(big.d.push(frame(Opcode.text, over, { masked: true }), 0, 10), 2008)
  t.equal(big.d.gathered, 0)
  t.same(big.seen.messages, [{ opcode: Opcode.text, text: undefined, compressed: false, size: 2000 }])
})
