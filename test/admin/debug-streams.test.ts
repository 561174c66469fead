import t from 'tap'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { snapshotStreams } from '../../src/admin/debug-streams.ts'
import type { StreamsSnapshot } from '../../src/admin/debug-streams.ts'

/** Starts a stream that sends 3 tokens at once, then stalls for `stallMs`; resolves when its body ends. */
async function slowStream(proxy: RunningProxy, stallMs: number, signal?: AbortSignal): Promise<Response> {
  return fetch(`${proxy.url}/sim/v1/chat/completions`, {
    method: 'POST',
    signal,
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-very-secret',
      'x-request-id': 'req-live-1',
      'x-tokentap-sim': JSON.stringify({
        ttft_ms: 10,
        first_tokens: 2,
        chunks: [
          [10, 1],
          [stallMs, 1],
        ],
      }),
    },
    body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'PROMPT-TEXT-MARKER' }] }),
  })
}

async function untilChunks(proxy: RunningProxy, n: number, headers: Record<string, string> = {}): Promise<StreamsSnapshot> {
  for (let i = 0; i < 1000; i++) {
    const snap = (await (await fetch(`${proxy.adminUrl}/debug/streams`, { headers })).json()) as StreamsSnapshot
    if ((snap.streams[0]?.chunks ?? 0) >= n) return snap
    await new Promise((r) => setTimeout(r, 10))
  }
  throw new Error('the stream never showed its chunks')
}

t.test('/debug/streams shows a stalled stream in flight: figures only, no credentials or text', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const ac = new AbortController()
  const res = await slowStream(proxy, 5000, ac.signal)
  const reader = res.body?.getReader()
  await reader?.read()
  const snap = await untilChunks(proxy, 2)
  await new Promise((r) => setTimeout(r, 150))
  const later = (await (await fetch(`${proxy.adminUrl}/debug/streams`)).json()) as StreamsSnapshot
  t.equal(snap.in_flight, 1)
  t.equal(snap.omitted, 0)
  const s = later.streams[0]
  t.match(s, { request_id: 'req-live-1', route: '/sim', provider: 'openai', model: 'gpt-4o-mini', method: 'POST', status: 200, chunks: 2, tokens: 3 })
  t.ok(s.ttft_ms !== null && s.ttft_ms >= 10, `ttft_ms ${s.ttft_ms}`)
  t.ok(s.headers_ms !== null && s.headers_ms <= (s.ttft_ms as number))
  t.ok(s.gap_ms >= 150, `the stall in progress shows as the current gap (${s.gap_ms} ms)`)
  t.ok(s.age_ms >= s.gap_ms)
  const raw = JSON.stringify(later)
  t.notMatch(raw, /sk-very-secret|PROMPT-TEXT-MARKER|authorization/i, 'no credentials, no prompt')
  ac.abort()
  await reader?.cancel().catch(() => {})
  await proxy.waitForRequests(1)
  const after = (await (await fetch(`${proxy.adminUrl}/debug/streams`)).json()) as StreamsSnapshot
  t.same(after, { in_flight: 0, shown: 0, omitted: 0, streams: [] }, 'gone once it ended')
})

t.test('/debug/streams wants the admin token when one is set, and stays bounded', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], admin: { host: '127.0.0.1', port: 0, token: 'adm1n' } })
  t.teardown(() => proxy.close())
  t.equal((await fetch(`${proxy.adminUrl}/debug/streams`)).status, 401)
  t.equal((await fetch(`${proxy.adminUrl}/debug/streams`, { headers: { authorization: 'Bearer nope!' } })).status, 401)
  const acs = [new AbortController(), new AbortController(), new AbortController()]
  const readers = await Promise.all(
    acs.map(async (ac) => {
      const res = await slowStream(proxy, 5000, ac.signal)
      const reader = res.body?.getReader()
      await reader?.read()
      return reader
    }),
  )
  const snap = await untilChunks(proxy, 1, { authorization: 'Bearer adm1n' })
  t.equal(snap.in_flight, 3)
  const bounded = snapshotStreams(proxy.app.tokentap.active, proxy.app.tokentap.now(), 2)
  t.equal(bounded.shown, 2)
  t.equal(bounded.omitted, 1, 'says how many were left out')
  t.ok(bounded.streams[0].age_ms >= bounded.streams[1].age_ms, 'oldest first')
  for (const ac of acs) ac.abort()
  await Promise.all(readers.map((r) => r?.cancel().catch(() => {})))
  await proxy.waitForRequests(3)
})
