import t from 'tap'
import { startUpstream } from '../helpers/upstream.ts'
import { proxyWithSockets } from '../helpers/watched-sockets.ts'
import { chatBody, openRequest, sleep, waitFor } from '../helpers/faults.ts'

const PIECE = Buffer.from(`: ${'x'.repeat(64 * 1024 - 3)}\n`) // an SSE comment line of 64 KiB
const TOTAL_PIECES = 400 // 25 MiB in all
const BOUND = 512 * 1024

t.test('a client that stops reading stops tokentap reading from the upstream, with bounded memory in between', async (t) => {
  let written = 0
  let blocked = 0
  let finished = false
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    for (let i = 0; i < TOTAL_PIECES; i++) {
      written += PIECE.length
      if (!res.write(PIECE)) {
        blocked++
        await new Promise((r) => res.once('drain', r))
      }
      if (res.destroyed) return
    }
    res.end()
    finished = true
  })
  t.teardown(() => upstream.close())

  // A short idle limit on the proxy's own timer (undici's body timeout off, as on tokentap's
  // agents): time the proxy itself holds the upstream back is not idleness.
  const { proxy, upstreamSockets, clientSockets } = await proxyWithSockets(t, upstream.url, { bodyTimeout: 0 }, { upstream: { idle_timeout_ms: 1000 } })

  const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: chatBody() })
  res.pause() // the client stops reading
  t.equal(res.statusCode, 200)

  await waitFor('the upstream to be blocked by backpressure', () => blocked > 0)
  await sleep(1500) // let every buffer on the way fill; longer than the idle limit
  const writtenWhilePaused = written
  let maxHeld = 0
  for (let i = 0; i < 20; i++) {
    const held = clientSockets.reduce((n, s) => n + s.writableLength, 0) + upstreamSockets.reduce((n, s) => n + s.readableLength, 0)
    maxHeld = Math.max(maxHeld, held)
    await sleep(25)
  }
  t.equal(written, writtenWhilePaused, 'the upstream made no progress while the client was not reading')
  t.ok(written < TOTAL_PIECES * PIECE.length, `the upstream is held back (${(written / 1024 / 1024).toFixed(1)} MiB of ${(TOTAL_PIECES * PIECE.length) / 1024 / 1024} MiB written)`)
  t.ok(maxHeld < BOUND, `bytes held in the proxy stay bounded: ${Math.round(maxHeld / 1024)} KiB`)
  t.equal(finished, false)

  // The client reads again: everything arrives, unchanged in length, and the request is ok.
  let received = 0
  res.on('data', (c: Buffer) => (received += c.length))
  res.resume()
  await new Promise<void>((resolve, reject) => {
    res.once('end', resolve)
    res.once('close', () => (res.complete ? resolve() : reject(new Error('the stream was cut before its end'))))
  })
  t.equal(received, TOTAL_PIECES * PIECE.length, 'every byte arrived once the client read again (the pause outlasted the idle limit)')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'ok')
  t.equal(line.bytes_out, TOTAL_PIECES * PIECE.length)
})
