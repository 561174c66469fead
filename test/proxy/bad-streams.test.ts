import { createHash, randomBytes } from 'node:crypto'
import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { chatBody, chatEvent } from '../helpers/faults.ts'

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex')

interface BadCase {
  readonly name: string
  readonly contentType: string
  readonly body: () => Buffer
}

const CASES: readonly BadCase[] = [
  {
    name: 'invalid JSON in an event',
    contentType: 'text/event-stream',
    body: () => Buffer.from(`${chatEvent(' the')}data: {"choices":[{"delta":{"content":" of"}\n\n${chatEvent(' and')}data: [DONE]\n\n`),
  },
  {
    name: 'binary junk',
    contentType: 'text/event-stream',
    body: () => randomBytes(1024 * 1024),
  },
  {
    name: 'a 10 MB single event',
    contentType: 'text/event-stream',
    body: () => Buffer.from(`${chatEvent(' the') + chatEvent('x'.repeat(10 * 1024 * 1024))}data: [DONE]\n\n`),
  },
  {
    name: 'an unknown content-type',
    contentType: 'application/x-unknown-stream',
    body: () => Buffer.from(`${chatEvent(' the')}data: [DONE]\n\n`),
  },
]

for (const c of CASES) {
  t.test(`${c.name}: the bytes pass through unchanged, the parser gives up quietly, the proxy goes on serving`, async (t) => {
    const body = c.body()
    const upstream = await startUpstream((req, res) => {
      if (req.url === '/v1/chat/completions') {
        res.writeHead(200, { 'content-type': c.contentType })
        // In pieces, as a stream would come.
        for (let i = 0; i < body.length; i += 64 * 1024) res.write(body.subarray(i, i + 64 * 1024))
        res.end()
      } else {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.end(`${chatEvent(' the') + chatEvent(' of')}data: [DONE]\n\n`)
      }
    })
    t.teardown(() => upstream.close())
    const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
    t.teardown(() => proxy.close())

    const res = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody() })
    t.equal(res.status, 200)
    t.equal(res.headers.get('content-type'), c.contentType)
    const got = Buffer.from(await res.arrayBuffer())
    t.equal(got.length, body.length)
    t.equal(sha256(got), sha256(body), 'the client got the very same bytes')

    const ok = await fetch(`${proxy.url}/up/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody() })
    t.equal(ok.status, 200)
    await ok.arrayBuffer()
    const lines = await proxy.waitForRequests(2)
    t.same(
      lines.map((l) => l.outcome),
      ['ok', 'ok'],
      'a stream the parser cannot read is still an ok request',
    )
    t.equal(lines[1].chunks, 2, 'the next request is measured as usual')

    const warnings = proxy.logs.filter((l) => l.level === 40)
    t.equal(warnings.length, 1, 'exactly one warning')
    t.match(warnings[0], { msg: /parser gave up/, provider: 'openai', route: '/up' })
    t.equal(proxy.logs.filter((l) => (l.level as number) >= 50).length, 0, 'no error logs')
    const m = await proxy.scrape()
    t.equal(sumOf(m, 'llm_parse_errors_total', { provider: 'openai', route: '/up' }), 1)
    t.equal(sumOf(m, 'llm_parse_errors_total'), 1)
  })
}
