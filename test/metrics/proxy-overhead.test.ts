import t from 'tap'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'

const body = JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [] })

t.test('a streamed request observes each llm_proxy_overhead_seconds phase once, within the request’s own end-to-end time', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const plan = simPlan({
    ttft_ms: 5,
    chunks: [
      [5, 1],
      [5, 1],
      [5, 1],
    ],
  })
  for (let i = 0; i < 2; i++) {
    const res = await fetch(`${proxy.url}/sim/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...plan.headers }, body })
    await res.text()
  }
  await proxy.waitForRequests(2)
  const samples = await proxy.scrape()
  const of = (name: string, phase: string): number[] => samples.filter((s) => s.name === name && s.labels.phase === phase).map((s) => s.value)
  const e2eSum = samples.find((s) => s.name === 'llm_request_duration_seconds_sum')?.value ?? Number.NaN
  for (const phase of ['request', 'first_chunk', 'chunk']) {
    t.same(of('llm_proxy_overhead_seconds_count', phase), [2], `${phase}: one observation per request`)
    const [sum] = of('llm_proxy_overhead_seconds_sum', phase)
    t.ok(sum >= 0 && sum < e2eSum, `${phase}: ${sum} s, below the requests' end-to-end ${e2eSum} s`)
  }
})

t.test('a content chunk that comes in the same upstream read as the response head arrived with the head: it is timed at the head’s arrival', async (t) => {
  // Every reading of the proxy's clock is 1 ms after the one before: a chunk timed when undici
  // got to it, after the head's handling, would come out later than the head it was read with
  // (and llm_proxy_overhead_seconds{phase="first_chunk"}, which starts at the same time, would
  // leave the head's handling out).
  let clock = 0
  const event = (text: string): string => `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"${text}"}}]}\n\n`
  const chunk = (s: string): string => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`
  let rest: (() => void) | undefined
  const upstream = net.createServer((socket) => {
    socket.once('data', () => {
      // One write: the head and the first content event reach the proxy in one read.
      socket.write(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n${chunk(event('Hello'))}`)
      rest = () => socket.end(`${chunk(event(' world'))}${chunk('data: [DONE]\n\n')}0\r\n\r\n`)
    })
  })
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r))
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` }] }, { now: () => ++clock })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
  const reader = (res.body as ReadableStream<Uint8Array>).getReader()
  const first = await reader.read()
  t.match(Buffer.from(first.value ?? []).toString(), /Hello/, 'the client has the first event before the upstream sends more')
  rest?.()
  while (!(await reader.read()).done);
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.ttft_ms, line.headers_ms, 'the first content chunk is timed at the head’s arrival')
})
