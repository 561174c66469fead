import { request } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { buildSimulator } from '../../src/sim/sim-app.ts'
import { validateConfig } from '../../src/config/load-config.ts'
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
