import { request } from 'node:http'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { buildSimulator } from '../../src/sim/sim-app.ts'
import { validateConfig } from '../../src/config/load-config.ts'
import { planFor } from '../../src/sim/schedule.ts'
import type { SimPlanRequest } from '../../src/sim/schedule.ts'
import { defined } from '../helpers/defined.ts'

/** Streams one simulated chat completion; resolves with the content events received (the role-only head has empty content) and how it ended. */
function stream(url: string, plan: SimPlanRequest): Promise<{ contents: number; ended: 'end' | 'broken' }> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: 'sim', stream: true, messages: [{ role: 'user', content: 'hi' }] })
    const req = request(`${url}/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(plan) } }, (res) => {
      let text = ''
      const done = (ended: 'end' | 'broken'): void => resolve({ contents: text.split('"content":"').length - text.split('"content":""').length, ended })
      res.setEncoding('utf8').on('data', (c: string) => (text += c))
      res.on('end', () => done('end'))
      res.on('error', () => done('broken'))
      res.on('aborted', () => done('broken'))
    })
    req.on('error', reject)
    req.end(body)
  })
}

t.test('reset_after n delivers exactly n content chunks, then breaks the stream', async (t) => {
  const simConfig = validateConfig({ routes: [{ prefix: '/sim', simulator: { jitter_ms: 0, stall_probability: 0, burst_every: 0 } }] }).routes[0].simulator
  const sim = buildSimulator(defined(simConfig, 'a simulator config'))
  await sim.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => sim.close())
  const url = `http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`
  // Chunks due at once are written back to back in one tick: the hardest case for a reset.
  for (const gap of [0, 5]) {
    for (const n of [1, 2, 3, 5]) {
      const r = await stream(url, { ttft_ms: 1, chunks: Array.from({ length: 7 }, () => [gap, 1]), reset_after: n })
      t.same(r, { contents: n, ended: 'broken' }, `reset_after ${n}, chunks ${gap} ms apart`)
    }
  }
  const whole = await stream(url, {
    ttft_ms: 1,
    chunks: [
      [0, 1],
      [0, 1],
    ],
    reset_after: 3,
  })
  t.same(whole, { contents: 3, ended: 'broken' }, 'a reset after the last chunk still comes before the end')
  const none = await stream(url, { ttft_ms: 1, chunks: [[0, 1]], reset_after: 0 })
  t.same(none, { contents: 0, ended: 'broken' }, 'reset_after 0 breaks the stream before any content')
})

t.test('a stream to a client that stops reading waits for the socket to drain, then resumes where it stopped', async (t) => {
  const simConfig = validateConfig({ routes: [{ prefix: '/sim', simulator: { jitter_ms: 0, stall_probability: 0, burst_every: 0 } }] }).routes[0].simulator
  const sim = buildSimulator(defined(simConfig, 'a simulator config'))
  await sim.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => sim.close())
  const port = (sim.server.address() as AddressInfo).port
  // Every time the simulator waits for 'drain' (it adds its listener), what it had written by
  // then (socket.bytesWritten counts the bytes still buffered too) and how much of that was
  // still buffered in the process. A wait no drain ends before the next turn of the event loop:
  // the kernel's buffers are full, the reader has stopped.
  const waits: { written: number; buffered: number }[] = []
  let highWaterMark = 0
  const stalled = new Promise<{ written: number; buffered: number }>((resolve) => {
    sim.server.prependListener('request', (_req: IncomingMessage, res: ServerResponse) => {
      highWaterMark = res.writableHighWaterMark
      let drains = 0
      res.on('drain', () => drains++)
      res.on('newListener', (event) => {
        if (event !== 'drain') return
        const at = { written: res.socket?.bytesWritten ?? 0, buffered: res.writableLength }
        waits.push(at)
        const before = drains
        setImmediate(() => {
          if (drains === before) resolve(at)
        })
      })
    })
  })
  // Far more than the kernel's buffers on loopback hold (a few MiB): the first event and 100,000 more.
  const chunks = 100_000
  const body = JSON.stringify({ model: 'sim', stream: true, messages: [{ role: 'user', content: 'hi' }], tokentap_sim: { ttft_ms: 0, chunks: Array.from({ length: chunks }, () => [0, 1]) } })
  let text = ''
  const received = new Promise<{ response: IncomingMessage; ended: Promise<void> }>((resolve, reject) => {
    const req = request(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (response) => {
      // Not read until the simulator has stopped: the socket's buffers fill, then the kernel's.
      response.pause()
      response.setEncoding('utf8')
      const ended = new Promise<void>((done) => response.on('end', done))
      resolve({ response, ended })
    })
    req.on('error', reject)
    req.end(body)
  })
  const [{ response, ended }, stall] = await Promise.all([received, stalled])
  response.on('data', (c: string) => (text += c))
  response.resume()
  await ended
  const contents = text.split('"content":"').length - text.split('"content":""').length
  t.equal(contents, chunks + 1, 'every chunk arrives once the client reads again')
  t.ok(text.endsWith('data: [DONE]\n\n'), 'and the stream ends as planned')
  const total = Buffer.byteLength(text)
  t.ok(stall.written < total / 2, `the simulator had written ${stall.written} of ${total} bytes when the reader stopped it`)
  const largest = Math.max(...waits.map((w) => w.buffered))
  t.ok(largest <= highWaterMark + 1024, `never more than the socket's high-water mark and one event buffered in the process (${largest} B, mark ${highWaterMark} B)`)
})

t.test('`slow` makes every wait of a plan that many times longer, generated or explicit, and keeps the tokens; out-of-range values are clamped', async (t) => {
  const cfg = defined(validateConfig({ routes: [{ prefix: '/sim', simulator: { stall_probability: 0.1 } }] }).routes[0].simulator, 'a simulator config')
  const waits = (request?: SimPlanRequest): number[] => planFor(cfg, 40, request, 3).chunks.map((c) => c.afterMs)
  const tokens = (request?: SimPlanRequest): number[] => planFor(cfg, 40, request, 3).chunks.map((c) => c.tokens)
  t.same(
    waits({ slow: 8 }),
    waits().map((ms) => ms * 8),
    'the generated plan (TTFT, gaps, stalls), 8 times slower',
  )
  t.same(tokens({ slow: 8 }), tokens(), 'the same tokens')
  t.same(waits({ ttft_ms: 10, chunks: [[20, 1]], slow: 3 }), [30, 60], 'an explicit plan too')
  t.same(waits({ slow: 0.5 }), waits(), 'below 1: not faster')
  t.same(waits({ slow: 1e9 }), waits({ slow: 1000 }), 'at most 1000 times')
  t.same(waits({ slow: 'x' as unknown as number }), waits(), 'not a number: ignored')
})
