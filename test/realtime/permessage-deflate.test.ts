import { randomBytes } from 'node:crypto'
import { constants, createDeflateRaw, deflateRawSync } from 'node:zlib'
import t from 'tap'
import { MORE, MessageInflater, negotiatedDeflate } from '../../src/realtime/permessage-deflate.ts'

/** Compresses messages as a permessage-deflate sender does: one raw deflate stream, a sync flush per message, its 4-byte tail cut. */
async function compressed(messages: string[], contextTakeover: boolean): Promise<Buffer[]> {
  const out: Buffer[] = []
  let stream = createDeflateRaw({ windowBits: 15 })
  for (const m of messages) {
    if (!contextTakeover) stream = createDeflateRaw({ windowBits: 15 })
    const parts: Buffer[] = []
    const onData = (c: Buffer) => parts.push(c)
    stream.on('data', onData)
    stream.write(m)
    await new Promise<void>((resolve) => stream.flush(constants.Z_SYNC_FLUSH, () => resolve()))
    stream.off('data', onData)
    const all = Buffer.concat(parts)
    out.push(all.subarray(0, all.length - 4))
  }
  return out
}

const events = Array.from({ length: 6 }, (_, i) => JSON.stringify({ type: 'response.output_text.delta', response_id: 'resp_1', delta: ` word${i % 2}` }))

t.test('the answer’s permessage-deflate terms: context takeover per direction', async (t) => {
  t.equal(negotiatedDeflate(undefined), undefined)
  t.equal(negotiatedDeflate('x-webkit-deflate-frame'), undefined)
  t.same(negotiatedDeflate('permessage-deflate'), { serverNoContextTakeover: false, clientNoContextTakeover: false })
  t.same(negotiatedDeflate('permessage-deflate; server_no_context_takeover; client_max_window_bits=10'), { serverNoContextTakeover: true, clientNoContextTakeover: false })
  t.same(negotiatedDeflate('foo, Permessage-Deflate; Client_No_Context_Takeover'), { serverNoContextTakeover: false, clientNoContextTakeover: true })
})

t.test('messages compressed with context takeover read back, each referring into the earlier ones', async (t) => {
  const parts = await compressed(events, true)
  t.ok(parts[5].length < parts[0].length / 2, 'later messages are mostly back-references')
  const inflater = new MessageInflater(true, 1024)
  t.same(
    parts.map((p) => inflater.inflate(p)?.toString()),
    events,
  )
})

t.test('messages compressed without context takeover read back each on its own', async (t) => {
  const parts = await compressed(events, false)
  const inflater = new MessageInflater(false, 1024)
  t.same(
    parts.map((p) => inflater.inflate(p)?.toString()),
    events,
  )
})

t.test('a message inflating past the limit is not read, and with context takeover nothing after it either', async (t) => {
  const parts = await compressed(['a'.repeat(5000), 'short'], true)
  const inflater = new MessageInflater(true, 1000)
  t.equal(inflater.inflate(parts[0]), undefined)
  t.match(inflater.broken, /inflating failed/)
  t.equal(inflater.inflate(parts[1]), undefined)
  const fresh = new MessageInflater(false, 1000)
  t.equal(fresh.inflate(Buffer.from('not deflate at all')), undefined)
  t.equal(fresh.broken, undefined, 'without context takeover the next message still stands alone')
})

t.test('a compressed message the measuring side skipped breaks the chain only with context takeover', async (t) => {
  const keep = new MessageInflater(true, 1000)
  keep.missed()
  t.match(keep.broken, /broke the deflate context/)
  const alone = new MessageInflater(false, 1000)
  alone.missed()
  t.equal(alone.broken, undefined)
})

t.test('past its first MiB, a direction inflating more than 200 times what it was sent is inflated no more', async (t) => {
  const [bomb] = await compressed(['a'.repeat(1024 * 1024)], false)
  t.ok(bomb.length < 2048)
  const inflater = new MessageInflater(false, 2 * 1024 * 1024)
  t.equal(inflater.inflate(bomb)?.length, 1024 * 1024, 'the first MiB is read')
  t.equal(inflater.inflate(bomb), undefined)
  t.match(inflater.broken, /^inflate budget: messages inflate more than 200×/)
  const [small] = await compressed(['{"type":"x"}'], false)
  t.equal(inflater.inflate(small), undefined, 'nor anything after it')
})

t.test('a message is inflated in slices of bounded output, across calls, and the next one still refers into it', async (t) => {
  const big = JSON.stringify({ type: 'response.output_audio.delta', delta: randomBytes(300 * 1024).toString('base64') })
  const [first, second] = await compressed([big, big.slice(-5000)], true)
  t.ok(second.length < 200, 'the second message is a back-reference into the first')
  const inflater = new MessageInflater(true, 1024 * 1024)
  inflater.begin(first)
  const sizes: number[] = []
  let out = inflater.step(50_000)
  while (out === MORE) {
    sizes.push(inflater.produced)
    t.ok(inflater.held >= first.length, 'the payload and the output so far are held')
    out = inflater.step(50_000)
  }
  t.equal(out?.toString(), big)
  t.ok(sizes.length >= 7, `${sizes.length + 1} slices`)
  t.same(
    sizes.filter((n) => n !== 50_000),
    [],
    'each slice but the last is the room given',
  )
  t.equal(inflater.held, 0)
  t.equal(inflater.inflate(second)?.toString(), big.slice(-5000))
})

t.test('a message that ends the deflate stream (BFINAL) reads, and so do later ones only without context takeover', async (t) => {
  const final = (text: string): Buffer => deflateRawSync(Buffer.from(text))
  const fresh = new MessageInflater(false, 1000)
  t.equal(fresh.inflate(final('{"type":"a"}'))?.toString(), '{"type":"a"}')
  t.equal(fresh.inflate(final('{"type":"b"}'))?.toString(), '{"type":"b"}')
  t.equal(fresh.broken, undefined)
  const chained = new MessageInflater(true, 1000)
  t.equal(chained.inflate(final('{"type":"a"}'))?.toString(), '{"type":"a"}')
  t.equal(chained.broken, 'a compressed message ended the deflate stream')
  t.equal(chained.inflate(final('{"type":"b"}')), undefined)
})

t.test('without context takeover, a message that fails or passes the limit mid-way leaves the next one readable', async (t) => {
  const [ok] = await compressed(['{"type":"ok"}'], false)
  const [long] = await compressed([randomBytes(3000).toString('base64')], false)
  const inflater = new MessageInflater(false, 2000)
  t.equal(inflater.inflate(long), undefined, 'past the limit')
  t.equal(inflater.inflate(ok)?.toString(), '{"type":"ok"}')
  t.equal(inflater.inflate(Buffer.from([0xff, 0xff, 0xff])), undefined, 'not deflate')
  t.equal(inflater.inflate(ok)?.toString(), '{"type":"ok"}')
  t.equal(inflater.broken, undefined)
  inflater.close()
  t.equal(inflater.inflate(ok)?.toString(), '{"type":"ok"}', 'a closed inflater opens a new stream')
  t.equal(inflater.step(1000), undefined, 'no message begun')
})
