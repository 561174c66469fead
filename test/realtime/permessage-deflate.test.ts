import { constants, createDeflateRaw } from 'node:zlib'
import t from 'tap'
import { MessageInflater, negotiatedDeflate } from '../../src/realtime/permessage-deflate.ts'

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
