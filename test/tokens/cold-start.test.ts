import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { startServerProcess } from '../helpers/server-process.ts'

// A fresh process counts its first request exactly like every later one: the tokenizers' cold
// start (V8 compiling their regular expressions, 10-80 ms) happens before the listeners open,
// never inside a read's counting budget, where it turned the rest of the first read into an
// estimate (8 tokens for these 3); so do the first calls of the counting path itself (the
// ReadBudget, the memo: about 0.2 ms of the 0.3), on every cluster worker.

const EVENTS = ['Hi', ' there', ' friend']
  .map((text) => `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}}}]}\n\n`)
  .join('')

/** An upstream answering every request with the three events in one write, no usage. */
async function oneReadUpstream(t: Test): Promise<string> {
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(`${EVENTS}data: [DONE]\n\n`)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

async function outputTokensOfRequests(t: Test, workers: number, n: number): Promise<{ tokens: unknown[]; pids: Set<unknown> }> {
  const upstream = await oneReadUpstream(t)
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0, workers },
    admin: { host: '127.0.0.1', port: 0 },
    routes: [{ prefix: '/up', upstream, provider: 'openai' }],
  })
  t.teardown(() => server.kill())
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening', 300_000)
  for (let i = 0; i < n; i++) {
    const res = await fetch(`http://${up.proxy as string}/up/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    })
    await res.arrayBuffer()
  }
  const lines: Record<string, unknown>[] = []
  while (lines.length < n) lines.push(await server.waitForLog((l) => l.msg === 'request' && !lines.includes(l)))
  return { tokens: lines.map((l) => l.output_tokens), pids: new Set(lines.map((l) => l.pid)) }
}

t.test('a fresh server process counts its first request’s three events in one read as 3 tokens, like the later ones', async (t) => {
  const { tokens } = await outputTokensOfRequests(t, 1, 3)
  t.same(tokens, [3, 3, 3])
})

t.test('each fresh cluster worker counts its first request exactly too', async (t) => {
  // node:cluster hands the connections out round-robin: two requests each.
  const { tokens, pids } = await outputTokensOfRequests(t, 2, 4)
  t.same(tokens, [3, 3, 3, 3])
  t.equal(pids.size, 2, 'both workers answered')
})
