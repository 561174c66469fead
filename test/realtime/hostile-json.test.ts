import t from 'tap'
import type { Test } from 'tap'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import type { SessionSummary } from '../../src/realtime/session.ts'
import { startProxy } from '../helpers/proxy.ts'
import { eventually, startWsUpstream, tapedClient } from '../helpers/realtime.ts'

/**
 * Uncompressed messages whose parse costs far more than their bytes (nesting, many keys):
 * the measuring side reads them over many turns of the event loop, within its per-turn budget,
 * so another session's response passes and is measured while they are still being read, and
 * each is read exactly, keeping its arrival time. Turns are counted, not timed: when the
 * upstream has a message whole, a session that parsed it in the turn it arrived holds nothing.
 */

const MAX_EVENT = 1024 * 1024

/** A response.create carrying `pad` (a JSON value) in its metadata. */
const create = (pad: string): string => `{"type":"response.create","response":{"metadata":{"pad":${pad}}}}`
/** About `bytes` of arrays nested 2,000 deep, side by side (a text nesting deeper than MAX_DEPTH is not read). */
const nested = (bytes: number): string => {
  const group = `${'['.repeat(2000)}${']'.repeat(2000)}`
  const rest = ((bytes % 4001) - 2) >> 1
  return create(`[${Array.from({ length: Math.floor(bytes / 4001) }, () => group).join(',')}${rest > 0 ? `,${'['.repeat(rest)}${']'.repeat(rest)}` : ''}]`)
}
/** `n` distinct keys in objects of `per` keys (an object of more than MAX_OBJECT_KEYS is not read). */
const keys = (n: number, per: number): string => create(`[${Array.from({ length: n / per }, (_, o) => `{${Array.from({ length: per }, (_, i) => `"k${o * per + i}":${i}`).join(',')}}`).join(',')}]`)

/** The upstream answers each response.create with a response of three text deltas. */
function answer(send: (event: unknown) => void, id: string): void {
  send({ type: 'response.created', response: { id } })
  for (const word of ['one', 'two', 'three']) send({ type: 'response.output_text.delta', response_id: id, delta: word })
  send({ type: 'response.done', response: { id, status: 'completed' } })
}

async function hostileClient(t: Test, hostile: readonly string[]): Promise<void> {
  let answered = 0
  const upstream = await startWsUpstream({
    onConnection: (c) =>
      c.ws.on('message', (data: Buffer) => {
        // Read without JSON.parse: the test's process is the proxy's too.
        if (data.subarray(0, 30).toString('latin1').includes('"response.create"')) answer((e) => c.ws.send(JSON.stringify(e)), `resp_${++answered}`)
      }),
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({
    limits: { max_event_bytes: MAX_EVENT },
    routes: [{ prefix: '/rt', upstream: upstream.url, provider: 'openai' }],
  })
  t.teardown(() => proxy.close())
  const responses: { model: string | undefined; r: FinishedResponse }[] = []
  const sessions: { model: string | undefined; s: SessionSummary }[] = []
  proxy.app.tokentap.realtime.listen({
    response: (who, _l, r) => responses.push({ model: who.model, r }),
    session: (who, _l, s) => sessions.push({ model: who.model, s }),
  })
  const url = `${proxy.url.replace('http', 'ws')}/rt/v1/realtime`
  const a = tapedClient(`${url}?model=hostile`)
  const b = tapedClient(`${url}?model=plain`)
  await Promise.all([a.opened, b.opened])
  const toA = await upstream.connection(1)
  const session = (model: string) => [...proxy.app.tokentap.realtime.open].find((s) => s.model === model)
  const heldA = (): number => session('hostile')?.held ?? 0

  for (const m of hostile) a.ws.send(m)
  await toA.message(hostile.length)
  const longest = Math.max(...hostile.map((m) => m.length))
  t.ok(heldA() >= longest, `when the upstream had them all, the proxy was still reading them (${heldA()} bytes held)`)

  // Another session's whole response, while the hostile messages are still being read.
  b.ws.send(JSON.stringify({ type: 'response.create' }))
  await b.message(5)
  await eventually('the plain session’s response measured', () => responses.some((x) => x.model === 'plain'))
  t.ok(heldA() > 0, 'another session’s response passed and was measured while they were still being read')

  // Each hostile message, read whole and exactly, was answered: one response each, nothing unread.
  await a.message(5 * hostile.length)
  await eventually('the hostile session’s responses measured', () => responses.filter((x) => x.model === 'hostile').length === hostile.length)
  t.equal(heldA(), 0)
  a.ws.close(1000)
  b.ws.close(1000)
  await Promise.all([a.closed, b.closed])
  await eventually('both sessions recorded', () => sessions.length === 2)
  const hostileSession = sessions.find((x) => x.model === 'hostile')?.s
  t.match(hostileSession, { messagesFromClient: hostile.length, messagesFromUpstream: 5 * hostile.length, unread: 0, parseError: undefined, responses: hostile.length })
  for (const { r } of responses) t.match(r, { outcome: 'ok', timing: { textDeltas: 3 } })
}

t.test('a message of 1 MiB of nested arrays, sent uncompressed, is read over turns while another session’s response passes', async (t) => {
  await hostileClient(t, [nested(MAX_EVENT - 100)])
})

t.test('a message of 60,000 keys in objects of 4,000, sent uncompressed, is read over turns while another session’s response passes', async (t) => {
  await hostileClient(t, [keys(60_000, 4_000)])
})

t.test('sixteen messages of 60 KiB of nested arrays, each under the size read in steps before, are read over turns', async (t) => {
  await hostileClient(
    t,
    Array.from({ length: 16 }, () => nested(60 * 1024)),
  )
})
