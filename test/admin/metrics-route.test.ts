import { get } from 'node:http'
import Fastify from 'fastify'
import t from 'tap'
import { metricsRoute } from '../../src/admin/metrics-route.ts'
import { Histogram } from '../../src/metrics/prometheus/histogram.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'
import type { MetricsSource } from '../../src/metrics/prometheus/source.ts'

/** GET /metrics on `source`; the body and the response. */
async function scrape(source: MetricsSource): Promise<{ status: number; body: string; close(): Promise<void> }> {
  const app = Fastify()
  metricsRoute(app, source)
  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    get(`${address}/metrics`, (res) => {
      const parts: Buffer[] = []
      res.on('data', (b: Buffer) => parts.push(b))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString() }))
    }).on('error', reject)
  })
  return { status, body, close: () => app.close() }
}

t.test('/metrics gives every batch back to its source once the socket wrote it, the same batch it was handed', async (t) => {
  const batches = [[Buffer.from('a 1\n'), Buffer.from('b 2\n')], [Buffer.from('c 3\n')], [Buffer.from('d 4\n')]]
  const recycled: (readonly Buffer[])[] = []
  const source: MetricsSource = {
    openMetrics: false,
    async *exposition() {
      yield* batches
    },
    recycle: (batch) => {
      recycled.push(batch)
    },
  }
  const r = await scrape(source)
  t.teardown(r.close)
  t.equal(r.status, 200)
  t.equal(r.body, 'a 1\nb 2\nc 3\nd 4\n')
  t.equal(recycled.length, 3, 'every batch came back once')
  t.ok(
    batches.every((b) => recycled.includes(b)),
    'as the same arrays',
  )
})

t.test('a scrape of many batches larger than the socket takes at once is served whole, each batch given back', async (t) => {
  // 4 MiB in 64 KiB batches: write() returns false again and again. On Node 22 a wait for
  // 'drain' alone stalled such a scrape after 128 KiB for ever (the event came inside uncork()).
  const N = 64
  const batches = Array.from({ length: N }, (_, i) => [Buffer.alloc(64 * 1024, 97 + (i % 26))])
  let recycled = 0
  const r = await scrape({
    openMetrics: false,
    async *exposition() {
      yield* batches
    },
    recycle: () => {
      recycled++
    },
  })
  t.teardown(r.close)
  t.equal(r.status, 200)
  t.equal(r.body.length, N * 64 * 1024, 'every byte of every batch')
  t.equal(r.body, batches.map((b) => b[0].toString()).join(''), 'in order')
  t.equal(recycled, N, 'every batch came back')
})

t.test('a source without recycle is served the same', async (t) => {
  const r = await scrape({
    openMetrics: false,
    async *exposition() {
      yield [Buffer.from('x 1\n')]
    },
  })
  t.teardown(r.close)
  t.equal(r.body, 'x 1\n')
})

t.test('scrapes of a registry through /metrics, its buffers reused, read the same as its text', async (t) => {
  const registry = new MetricsRegistry({ processMetrics: false })
  const h = new Histogram({ name: 'x_seconds', help: 'x', labelNames: ['model'], buckets: [0.01, 0.1, 1, 10] })
  registry.register(h)
  // Enough series for several batches of BATCH_BYTES.
  for (let i = 0; i < 3000; i++) h.labels(`model-${i}`).observe(i / 1000, 1 + (i % 7))
  const recycled: number[] = []
  const source: MetricsSource = {
    openMetrics: false,
    exposition: (om) => registry.exposition(om),
    recycle: (batch) => {
      recycled.push(batch.length)
      registry.recycle(batch)
    },
  }
  const first = await scrape(source)
  t.teardown(first.close)
  t.ok(recycled.length > 2, `${recycled.length} batches given back`)
  const want = await registry.text()
  t.equal(first.body, want)
  for (let i = 0; i < 3000; i += 7) h.labels(`model-${i}`).observe(5)
  const second = await scrape(source)
  t.teardown(second.close)
  t.equal(second.body, await registry.text(), 'the next scrape, written into the recycled buffers, is whole')
  t.not(second.body, want)
})
