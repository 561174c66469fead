import t from 'tap'
import zlib from 'node:zlib'
import { EventStreamDecoder } from '../../src/parsers/eventstream-decoder.ts'
import type { EventFrame } from '../../src/parsers/eventstream-decoder.ts'
import { fixture, splitOffsets } from '../helpers/feed.ts'
import { frame, rawFrame, walkFrames } from '../helpers/eventstream.ts'

function decode(pieces: Buffer[], max?: number): { frames: EventFrame[]; errors: string[] } {
  const d = new EventStreamDecoder(max)
  const frames: EventFrame[] = []
  const errors: string[] = []
  for (const p of pieces)
    d.push(
      p,
      (f) => frames.push(f),
      (e) => errors.push(e),
    )
  d.end((e) => errors.push(e))
  return { frames, errors }
}

const brief = (frames: EventFrame[]): string[] => frames.map((f) => `${f.headers[':event-type']}:${f.payload.toString('utf8')}`)

for (const name of ['bedrock/converse-stream-nova-text.eventstream', 'bedrock/converse-stream-claude-reasoning.eventstream']) {
  t.test(`${name} decodes to the same frames whole, split at any byte and byte by byte`, async (t) => {
    const bytes = fixture(name)
    const want = walkFrames(bytes).map((f) => `${f.headers[':event-type']}:${f.payload.toString('utf8')}`)
    const whole = decode([bytes])
    t.same(whole.errors, [])
    t.same(brief(whole.frames), want)
    t.equal(whole.frames.length, name.includes('nova') ? 33 : 25, 'the frame count SOURCES.md gives')
    for (const i of splitOffsets(bytes.length, 600)) {
      const r = decode([bytes.subarray(0, i), bytes.subarray(i)])
      if (r.errors.length > 0 || r.frames.length !== want.length) t.fail(`split at ${i}: ${r.errors.join()}`)
    }
    const bytewise = decode([...bytes].map((b) => Buffer.from([b])))
    t.same(brief(bytewise.frames), want, 'one byte per read')
    t.same(bytewise.errors, [])
  })
}

t.test('headers of every type are skipped by size and string headers kept', async (t) => {
  const others = Buffer.concat([
    Buffer.from([1, 0x61, 0]), // bool true
    Buffer.from([1, 0x62, 2, 7]), // byte
    Buffer.from([1, 0x63, 3, 0, 7]), // short
    Buffer.from([1, 0x64, 4, 0, 0, 0, 7]), // int
    Buffer.from([1, 0x65, 5, 0, 0, 0, 0, 0, 0, 0, 7]), // long
    Buffer.from([1, 0x66, 6, 0, 2, 9, 9]), // bytes
    Buffer.from([1, 0x67, 8, 0, 0, 0, 0, 0, 0, 0, 7]), // timestamp
    Buffer.concat([Buffer.from([1, 0x68, 9]), Buffer.alloc(16)]), // uuid
  ])
  const stringHeader = Buffer.concat([Buffer.from([11]), Buffer.from(':event-type'), Buffer.from([7, 0, 1]), Buffer.from('x')])
  const r = decode([rawFrame(Buffer.concat([others, stringHeader]), Buffer.from('{}'))])
  t.same(r.errors, [])
  t.same(r.frames[0]?.headers, { ':event-type': 'x' })
  t.equal(r.frames[0]?.payload.toString(), '{}')
})

t.test('a corrupt message CRC stops decoding and is reported once', async (t) => {
  const a = frame({ ':event-type': 'a' }, '{"n":1}')
  const b = frame({ ':event-type': 'b' }, '{"n":2}')
  b[b.length - 6] ^= 0xff
  const r = decode([Buffer.concat([a, b, a])])
  t.same(brief(r.frames), ['a:{"n":1}'])
  t.same(r.errors, ['message CRC mismatch'])
})

t.test('a corrupt prelude CRC, bad lengths or a frame over the limit stop decoding', async (t) => {
  const a = frame({ ':event-type': 'a' }, '{"n":1}')
  const bad = Buffer.from(a)
  bad[9] ^= 1
  t.same(decode([bad]).errors, ['prelude CRC mismatch'])
  t.same(decode([a.subarray(0, 5), a.subarray(5, 11), a.subarray(11)]).frames.length, 1, 'a prelude split across reads is read whole')
  const bad2 = Buffer.from(a)
  bad2[8] ^= 1
  t.same(decode([bad2.subarray(0, 6), bad2.subarray(6)]).errors, ['prelude CRC mismatch'], 'a prelude split across reads is checked')
  const big = frame({ ':event-type': 'a' }, 'x'.repeat(2000))
  t.match(decode([big], 1024).errors, [/over the limit/])
  const short = rawFrame(Buffer.alloc(0), Buffer.alloc(0))
  short.writeUInt32BE(12, 0)
  short.writeUInt32BE(zlib.crc32(short.subarray(0, 8)), 8)
  t.match(decode([short]).errors, [/bad frame lengths/])
})

t.test('malformed headers are reported', async (t) => {
  t.same(decode([rawFrame(Buffer.from([3, 0x61, 0x62, 0x63, 42]), Buffer.alloc(0))]).errors, ['malformed frame headers'], 'an unknown type')
  t.same(decode([rawFrame(Buffer.from([3, 0x61, 0x62, 0x63, 7, 0, 9, 0x61]), Buffer.alloc(0))]).errors, ['malformed frame headers'], 'a string longer than the headers')
  t.same(decode([rawFrame(Buffer.from([9, 0x61]), Buffer.alloc(0))]).errors, ['malformed frame headers'], 'a name longer than the headers')
})

t.test('a stream cut inside a frame is reported at the end', async (t) => {
  const a = frame({ ':event-type': 'a' }, '{"n":1}')
  const r = decode([Buffer.concat([a, a.subarray(0, 20)])])
  t.equal(r.frames.length, 1)
  t.match(r.errors, [/stream ended inside a frame/])
})
