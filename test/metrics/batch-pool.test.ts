import t from 'tap'
import { BatchPool } from '../../src/metrics/prometheus/batch-pool.ts'

const bytes = (s: string): Buffer => Buffer.from(s)
const text = (batch: readonly Buffer[] | undefined): string => Buffer.concat(batch ?? []).toString()
/** A batch that must be there (the buffer filled). */
const filled = (batch: Buffer[] | undefined): Buffer[] => {
  if (batch === undefined) throw new Error('no batch: the buffer did not fill')
  return batch
}

t.test('pieces are copied into buffers of the pool size, a batch handed out each time one fills', async (t) => {
  const pool = new BatchPool(8, 4)
  const b = pool.batches()
  const piece = bytes('abc')
  t.equal(b.add(piece), undefined)
  piece.write('XYZ')
  t.equal(b.add(bytes('defg')), undefined)
  t.equal(b.pending, 7)
  t.equal(text(b.add(bytes('hij'))), 'abcdefgh', 'the first buffer, filled, with the bytes as they were when added')
  t.equal(b.pending, 2)
  t.equal(text(b.take()), 'ij')
  t.same(b.take(), [], 'nothing more to take')
  t.equal(text(b.add(bytes('0123456789abcdefghij'))), '0123456789abcd', 'a piece bigger than a buffer is split across buffers, in order')
  t.equal(text(b.take()), 'efghij')
})

t.test('a buffer is filled again only once every view of it came back and its scrape moved on', async (t) => {
  const pool = new BatchPool(4, 4)
  const first = pool.batches()
  const a = filled(first.add(bytes('aaaa')))
  first.add(bytes('bb'))
  const partial = first.take()
  t.equal(pool.free, 0)
  // A second scrape while the first one's views are still being written.
  const second = pool.batches()
  const c = filled(second.add(bytes('cccc')))
  t.equal(text(a), 'aaaa', 'a view handed out is never written over')
  t.equal(text(partial), 'bb')
  t.not(c[0].buffer, a[0].buffer)
  pool.recycle(a)
  t.equal(pool.free, 1, 'a filled buffer whose one view came back is free')
  pool.recycle(a)
  t.equal(pool.free, 1, 'a view given back twice counts once')
  pool.recycle(partial)
  t.equal(pool.free, 1, 'the buffer the first scrape still fills is not free')
  first.close()
  t.equal(pool.free, 2, 'its scrape ended and its views came back: free')
  const third = pool.batches()
  const d = filled(third.add(bytes('dddd')))
  t.ok([a[0].buffer, partial[0].buffer].includes(d[0].buffer), 'the next scrape fills a recycled buffer')
  pool.recycle([Buffer.from('not from the pool')])
  t.equal(pool.free, 1, 'buffers the pool did not hand out are ignored')
})

t.test('at most `keep` buffers are kept free', async (t) => {
  const pool = new BatchPool(2, 2)
  const b = pool.batches()
  const batches = [filled(b.add(bytes('11'))), filled(b.add(bytes('22'))), filled(b.add(bytes('33')))]
  for (const x of batches) pool.recycle(x)
  t.equal(pool.free, 2)
})
