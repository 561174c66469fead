import t from 'tap'
import type { Test } from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { Received, VirtualClock, playSteps, rawCall, startHeldSimulator } from '../helpers/virtual-time.ts'
import type { RawCall } from '../helpers/virtual-time.ts'
import { snapshotStreams } from '../../src/admin/debug-streams.ts'
import type { StreamsSnapshot } from '../../src/admin/debug-streams.ts'

/**
 * On virtual time: the held simulator sends a stream's first steps and holds the rest, so a
 * stall lasts exactly as long as the test says and every figure is exact.
 */

/** A stream of 2 tokens, then 1 after 10 ms, then a 5 s stall (held until the test moves on). */
function slowStream(proxy: RunningProxy, received: Received): RawCall {
  return rawCall(received, `${proxy.url}/sim/v1/chat/completions`, {
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-very-secret',
      'x-request-id': 'req-live-1',
      'x-tokentap-sim': JSON.stringify({
        ttft_ms: 10,
        first_tokens: 2,
        chunks: [
          [10, 1],
          [5000, 1],
        ],
      }),
    },
    body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'PROMPT-TEXT-MARKER' }] }),
  })
}

async function held(t: Test, admin: Record<string, unknown> = {}): Promise<{ proxy: RunningProxy; clock: VirtualClock; sim: Awaited<ReturnType<typeof startHeldSimulator>> }> {
  const clock = new VirtualClock(1000)
  const sim = await startHeldSimulator()
  t.teardown(() => sim.close())
  const proxy = await startProxy({ routes: [{ prefix: '/sim', upstream: sim.url }], admin: { host: '127.0.0.1', port: 0, ...admin } }, { now: clock.now })
  t.teardown(() => proxy.close())
  return { proxy, clock, sim }
}

t.test('/debug/streams shows a stalled stream in flight: figures only, no credentials or text', async (t) => {
  const { proxy, clock, sim } = await held(t)
  const received = new Received()
  const start = clock.now()
  const call = slowStream(proxy, received)
  // The head with the role event, the 2-token chunk at 10 ms and the 1-token one at 20 ms.
  await playSteps(clock, sim, received, { steps: 3 })
  clock.set(start + 170)
  const snap = (await (await fetch(`${proxy.adminUrl}/debug/streams`)).json()) as StreamsSnapshot
  t.equal(snap.in_flight, 1)
  t.equal(snap.omitted, 0)
  t.same(
    snap.streams[0],
    {
      request_id: 'req-live-1',
      route: '/sim',
      provider: 'openai',
      model: 'gpt-4o-mini',
      method: 'POST',
      status: 200,
      age_ms: 170,
      headers_ms: 0,
      ttft_ms: 10,
      chunks: 2,
      tokens: 3,
      gap_ms: 150,
    },
    'the stall in progress shows as the current gap: 150 ms since the chunk at 20 ms',
  )
  t.notMatch(JSON.stringify(snap), /sk-very-secret|PROMPT-TEXT-MARKER|authorization/i, 'no credentials, no prompt')
  call.abort()
  await proxy.waitForRequests(1)
  const after = (await (await fetch(`${proxy.adminUrl}/debug/streams`)).json()) as StreamsSnapshot
  t.same(after, { in_flight: 0, shown: 0, omitted: 0, streams: [] }, 'gone once it ended')
})

t.test('/debug/streams wants the admin token when one is set, and stays bounded', async (t) => {
  const { proxy, clock, sim } = await held(t, { token: 'adm1n' })
  t.equal((await fetch(`${proxy.adminUrl}/debug/streams`)).status, 401)
  t.equal((await fetch(`${proxy.adminUrl}/debug/streams`, { headers: { authorization: 'Bearer nope!' } })).status, 401)
  const received = new Received()
  const calls: RawCall[] = []
  for (let i = 0; i < 3; i++) {
    clock.set(clock.now() + 100)
    calls.push(slowStream(proxy, received))
    await playSteps(clock, sim, received, { steps: 2 })
  }
  const snap = (await (await fetch(`${proxy.adminUrl}/debug/streams`, { headers: { authorization: 'Bearer adm1n' } })).json()) as StreamsSnapshot
  t.equal(snap.in_flight, 3)
  const bounded = snapshotStreams(proxy.app.tokentap.active, clock.now(), 2)
  t.equal(bounded.shown, 2)
  t.equal(bounded.omitted, 1, 'says how many were left out')
  t.same(
    bounded.streams.map((s) => s.age_ms),
    [230, 120],
    'oldest first',
  )
  for (const call of calls) call.abort()
  await proxy.waitForRequests(3)
})
