import t from 'tap'
import { readdirSync } from 'node:fs'
import { SseDecoder } from '../../src/parsers/sse-decoder.ts'
import { fixture, splitOffsets } from '../helpers/fixtures.ts'
import { repoPath } from '../helpers/paths.ts'

type Ev = [string, string]

function decode(parts: Uint8Array[], max = 1 << 20): { events: Ev[]; oversized: number[] } {
  const d = new SseDecoder(max)
  const events: Ev[] = []
  const oversized: number[] = []
  for (const p of parts)
    d.push(
      p,
      (e, data) => events.push([e, data]),
      (n) => oversized.push(n),
    )
  d.end()
  return { events, oversized }
}

/**
 * An independent, string-level reading of the WHATWG event-stream rules, to check the byte
 * decoder against: normalise line ends, then process line by line.
 */
function reference(text: string): Ev[] {
  const out: Ev[] = []
  let data: string[] | undefined
  let event = ''
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
  const lines = text.split(/\r\n|\r|\n/)
  const complete = /(\r\n|\r|\n)$/.test(text)
  if (!complete) lines.pop()
  else lines.pop() // the empty string after the final line end
  for (const line of lines) {
    if (line === '') {
      if (data !== undefined) out.push([event, data.join('\n')])
      data = undefined
      event = ''
      continue
    }
    if (line.startsWith(':')) continue
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'data') {
      if (data === undefined) data = []
      data.push(value)
    } else if (field === 'event') event = value
  }
  return out
}

const fixtureDir = repoPath('test', 'fixtures')
const sseFixtures = readdirSync(fixtureDir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.sse'))

t.test('every recorded SSE stream decodes as the reference reading of the spec', async (t) => {
  t.ok(sseFixtures.length >= 15, `found ${sseFixtures.length} recorded SSE streams`)
  for (const f of sseFixtures) {
    const bytes = fixture(f)
    const want = reference(bytes.toString('utf8'))
    t.ok(want.length > 0, `${f} has events`)
    t.same(decode([bytes]).events, want, f)
  }
})

t.test('a recorded stream split at any byte gives the same events', async (t) => {
  for (const f of sseFixtures) {
    const bytes = fixture(f)
    const want = decode([bytes]).events
    let bad = 0
    for (const at of splitOffsets(bytes.length, bytes.length > 20_000 ? 150 : 2000)) {
      const got = decode([bytes.subarray(0, at), bytes.subarray(at)]).events
      if (JSON.stringify(got) !== JSON.stringify(want)) bad++
    }
    t.equal(bad, 0, `${f}: every 2-way split matches`)
  }
})

t.test('a stream fed one byte at a time gives the same events', async (t) => {
  for (const f of ['gemini/gemini-sse-crlf-text.sse', 'anthropic/messages-text-ping-between-deltas.sse', 'openai/chat-text-role-first-usage-chunk.sse', 'tgi/generate-stream-native.sse']) {
    const bytes = fixture(f)
    const parts = Array.from(bytes, (_, i) => bytes.subarray(i, i + 1))
    t.same(decode(parts).events, decode([bytes]).events, f)
  }
})

t.test('LF, CRLF and CR line ends are all line ends, also when CRLF is split across reads', async (t) => {
  const lf = 'event: a\ndata: 1\n\ndata: 2\n\n'
  const crlf = lf.replace(/\n/g, '\r\n')
  const cr = lf.replace(/\n/g, '\r')
  const want: Ev[] = [
    ['a', '1'],
    ['', '2'],
  ]
  for (const text of [lf, crlf, cr]) {
    const b = Buffer.from(text)
    t.same(decode([b]).events, want)
    for (const at of splitOffsets(b.length)) t.same(decode([b.subarray(0, at), b.subarray(at)]).events, want, `${JSON.stringify(text)} split at ${at}`)
  }
  // A CR that ends one read and an LF that starts the next are one line end, not two.
  t.same(decode([Buffer.from('data: x\r'), Buffer.from('\ndata: y\r\n\r\n')]).events, [['', 'x\ny']])
})

t.test('comments and keep-alives are not events; multi-line data joins with a line feed', async (t) => {
  const text = ': keep-alive\n\n: OPENROUTER PROCESSING\ndata: first\ndata:second\ndata\n\n'
  t.same(decode([Buffer.from(text)]).events, [['', 'first\nsecond\n']])
})

t.test('only one space after the colon is stripped; unknown fields and id/retry are ignored', async (t) => {
  t.same(decode([Buffer.from('id: 7\nretry: 10\nfoo: bar\ndata:  two spaces\ndatabase: no\n\n')]).events, [['', ' two spaces']])
})

t.test('a leading byte-order mark is skipped, also when split', async (t) => {
  const b = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('data: x\n\n')])
  for (const at of splitOffsets(b.length)) t.same(decode([b.subarray(0, at), b.subarray(at)]).events, [['', 'x']], `split at ${at}`)
})

t.test('a multi-byte character split across reads decodes intact', async (t) => {
  const b = Buffer.from('data: héllo 🌍 wörld\n\n')
  for (const at of splitOffsets(b.length)) t.same(decode([b.subarray(0, at), b.subarray(at)]).events, [['', 'héllo 🌍 wörld']])
})

t.test('each value decodes as its own bytes would, in ASCII reads, mixed reads and with invalid UTF-8', async (t) => {
  // The decoder reads a whole read as one latin1 string and slices ASCII values out of it; values
  // of a read with any other byte are decoded from their bytes. Both must give Buffer's UTF-8.
  const values = [Buffer.from('plain ascii'), Buffer.from('héllo 🌍'), Buffer.from([0x61, 0xff, 0x62]), Buffer.from([0xe2, 0x82]), Buffer.from([0xc3, 0x28, 0x7f, 0x80]), Buffer.from('{"a":1}')]
  const stream = Buffer.concat(values.flatMap((v) => [Buffer.from('data: '), v, Buffer.from('\n\n')]))
  const want = values.map((v) => ['', v.toString('utf8')])
  t.same(decode([stream]).events, want, 'one read')
  for (const at of splitOffsets(stream.length)) t.same(decode([stream.subarray(0, at), stream.subarray(at)]).events, want, `split at ${at}`)
  const ascii = Buffer.from('data: a\n\ndata: b\r\n\r\nevent: e\rdata: c\r\r')
  t.same(
    decode([ascii]).events,
    [
      ['', 'a'],
      ['', 'b'],
      ['e', 'c'],
    ],
    'an ASCII read with every line end',
  )
})

t.test('an event left incomplete at the end of the stream is not dispatched', async (t) => {
  t.same(decode([Buffer.from('data: a\n\ndata: [DONE]')]).events, [['', 'a']])
})

t.test('an event over the size limit is dropped and reported, and memory stays bounded', async (t) => {
  const big = 'x'.repeat(5000)
  const text = `data: small\n\ndata: ${big}\n\ndata: after\n\n`
  const b = Buffer.from(text)
  for (const at of [0, 10, 20, 3000, b.length - 5]) {
    const r = decode([b.subarray(0, at), b.subarray(at)], 1024)
    t.same(r.events, [
      ['', 'small'],
      ['', 'after'],
    ])
    t.equal(r.oversized.length, 1, 'reported once')
  }
  // A huge line fed in many reads never accumulates beyond the limit.
  const d = new SseDecoder(1024)
  const events: string[] = []
  let oversized = 0
  d.push(
    Buffer.from('data: '),
    (_e, data) => events.push(data),
    () => oversized++,
  )
  for (let i = 0; i < 1000; i++)
    d.push(
      Buffer.alloc(1024, 0x61),
      (_e, data) => events.push(data),
      () => oversized++,
    )
  d.push(
    Buffer.from('\n\ndata: ok\n\n'),
    (_e, data) => events.push(data),
    () => oversized++,
  )
  t.same(events, ['ok'])
  t.equal(oversized, 1)
})

t.test('a very long comment line does not spoil the next event', async (t) => {
  const b = Buffer.from(`:${'c'.repeat(4000)}\ndata: next\n\n`)
  const r = decode([b.subarray(0, 100), b.subarray(100, 2000), b.subarray(2000)], 1024)
  t.same(r.events, [['', 'next']])
  t.same(r.oversized, [])
})
