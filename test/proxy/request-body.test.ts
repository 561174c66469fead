import { createHash, randomBytes } from 'node:crypto'
import { request } from 'node:http'
import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { waitFor } from '../helpers/faults.ts'

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex')

/** A chat request with a large base64 image, `model` first as SDKs write it. */
function imageBody(model: string, bytes: number): Buffer {
  const image = randomBytes(Math.ceil((bytes * 3) / 4))
    .toString('base64')
    .slice(0, bytes)
  return Buffer.from(JSON.stringify({ model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${image}` } }] }] }))
}

const okUpstream = () =>
  startUpstream((_req, res, body) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ sha256: sha256(body), bytes: body.length }))
  })

t.test('a 20 MB body with a base64 image passes intact and its model is the label', async (t) => {
  const upstream = await okUpstream()
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const body = imageBody('gpt-4o', 20 * 1024 * 1024)
  const res = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body as unknown as BodyInit })
  t.equal(res.status, 200)
  t.same(await res.json(), { sha256: sha256(body), bytes: body.length }, 'the upstream got the same bytes')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.model, 'gpt-4o')
  t.equal(line.bytes_in, body.length)
})

t.test('a chunked body with no length streams upstream as it arrives, intact', async (t) => {
  const upstream = await okUpstream()
  const seen: number[] = []
  upstream.server.prependListener('request', (req) => req.on('data', (c: Buffer) => seen.push(c.length)))
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const body = imageBody('claude-x', 4 * 1024 * 1024)
  const half = 2 * 1024 * 1024
  const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = request(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => (text += c.toString()))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
    })
    req.on('error', reject)
    req.write(body.subarray(0, half))
    // Only once the upstream has bytes of the first half is the second half sent: the body is streamed, not buffered.
    void waitFor('the upstream to receive the first half', () => seen.length > 0, 10_000).then(() => req.end(body.subarray(half)), reject)
  })
  const { status, text } = await answer
  t.equal(status, 200)
  t.same(JSON.parse(text), { sha256: sha256(body), bytes: body.length })
  t.notOk(upstream.requests[0].rawHeaders.map((h) => h.toLowerCase()).includes('content-length'), 'no length was invented')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.model, 'claude-x', 'the model is read from the head of a chunked body too')
})

t.test('a body whose Content-Length is over the limit gets 413 and never reaches the upstream', async (t) => {
  const upstream = await okUpstream()
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], server: { host: '127.0.0.1', port: 0, body_limit_bytes: 1024 * 1024 } })
  t.teardown(() => proxy.close())
  const body = imageBody('gpt-4o', 2 * 1024 * 1024)
  const res = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body as unknown as BodyInit })
  t.equal(res.status, 413)
  t.same(await res.json(), { error: { message: 'request body is larger than the limit of 1048576 bytes', type: 'proxy_error', code: 'TOKENTAP_ERR_BODY_TOO_LARGE' } })
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.status, 413)
  t.equal(upstream.requests.length, 0, 'the upstream never saw the request')
  t.equal(upstream.sockets, 0, 'not even a connection')
  t.equal(sumOf(await proxy.scrape(), 'llm_requests_total', { outcome: 'error', status_code: '413' }), 1)

  const small = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', body: imageBody('gpt-4o', 1000) as unknown as BodyInit })
  t.equal(small.status, 200, 'the proxy goes on serving')
})

t.test('a chunked body that outgrows the limit aborts the upstream request and gets 413', async (t) => {
  const upstream = await startUpstream(
    (req) => {
      // reads the body but never answers: the proxy must give up
      req.resume()
    },
    { raw: true },
  )
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], server: { host: '127.0.0.1', port: 0, body_limit_bytes: 256 * 1024 } })
  t.teardown(() => proxy.close())
  const result = await new Promise<{ status?: number; text?: string; error?: string }>((resolve) => {
    const req = request(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => (text += c.toString()))
      res.on('end', () => resolve({ status: res.statusCode, text }))
      res.on('error', (e) => resolve({ status: res.statusCode, error: e.message }))
    })
    req.on('error', (e) => resolve({ error: e.message }))
    const piece = Buffer.alloc(16 * 1024, 'a')
    req.write('{"model":"gpt-4o","x":"')
    let i = 0
    const pump = (): void => {
      while (i++ < 64 && !req.destroyed) {
        if (!req.write(piece)) {
          req.once('drain', pump)
          return
        }
      }
      if (!req.destroyed) req.end('"}')
    }
    pump()
  })
  t.equal(result.status, 413, `the client got 413 (${result.error ?? ''})`)
  t.match(result.text ?? '', /TOKENTAP_ERR_BODY_TOO_LARGE/)
  const [line] = await proxy.waitForRequests(1)
  await waitFor('the upstream request to be aborted', () => upstream.aborted === 1)
  t.equal(line.outcome, 'error')
  t.equal(line.status, 413)
  t.equal(line.model, 'gpt-4o', 'the model was read from the head of the body')
  t.equal(upstream.requests.length, 1)
})
