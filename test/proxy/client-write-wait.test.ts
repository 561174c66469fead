import { connect } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import { startUpstream } from '../helpers/upstream.ts'

/**
 * llm_client_write_wait_seconds with real sockets: a raw TCP client that stops reading for 2 s
 * in the middle of a multi-megabyte stream, and one that reads as fast as it can. The 2 s pause
 * is the reader's own behaviour; nothing here asserts how fast tokentap is.
 */

const CONTENT = 'data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n'
const PIECE = Buffer.from(`: ${'x'.repeat(64 * 1024 - 3)}\n`) // an SSE comment line of 64 KiB
const PIECES = 384 // 24 MiB: more than every socket buffer on the way can hold
const STREAM_BYTES = CONTENT.length + PIECES * PIECE.length + 'data: [DONE]\n\n'.length

/** An upstream that streams one content event, then `pieces` comment lines, as fast as it may. */
async function streamingUpstream(t: Test, pieces: number) {
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write(CONTENT)
    for (let i = 0; i < pieces; i++) {
      if (!res.write(PIECE)) await new Promise((r) => res.once('drain', r))
      if (res.destroyed) return
    }
    res.end('data: [DONE]\n\n')
  })
  t.teardown(() => upstream.close())
  return upstream
}

/**
 * A raw HTTP/1.1 client: sends the request, reads the response to its end. `pauseAfter`: once
 * that many bytes arrived it stops reading (the socket is paused: the kernel buffers fill and
 * the proxy's writes return false) for `pauseMs`, then reads on. Resolves with the bytes read.
 */
function rawClient(url: string, path: string, pauseAfter: number, pauseMs: number): Promise<number> {
  const { hostname, port } = new URL(url)
  const body = '{"model":"m","stream":true,"messages":[]}'
  return new Promise((resolve, reject) => {
    let received = 0
    let paused = false
    const socket = connect(Number(port), hostname, () => {
      socket.write(`POST ${path} HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`)
    })
    socket.on('data', (c: Buffer) => {
      received += c.length
      if (!paused && received >= pauseAfter) {
        paused = true
        socket.pause()
        setTimeout(() => socket.resume(), pauseMs)
      }
    })
    socket.on('error', reject)
    socket.on('end', () => resolve(received))
  })
}

t.test('a client that stops reading for 2 s in the middle of a 24 MiB stream observes the wait once, at least 1.5 s', async (t) => {
  const upstream = await streamingUpstream(t, PIECES)
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())

  const received = await rawClient(proxy.url, '/up/v1/chat/completions', 1024 * 1024, 2000)
  t.ok(received > STREAM_BYTES, 'the whole stream arrived (with the head and chunk framing)')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'ok')
  const waitMs = line.client_write_wait_ms as number
  t.ok(waitMs >= 1500, `the log line's client_write_wait_ms: ${waitMs}`)

  const m = await proxy.scrape()
  const labels = { provider: 'openai', route: '/up' }
  t.equal(sumOf(m, 'llm_client_write_wait_seconds_count', labels), 1, 'one observation for the request')
  const sum = sumOf(m, 'llm_client_write_wait_seconds_sum', labels)
  t.ok(sum >= 1.5, `the observation sums to ${sum} s`)
  t.equal(Math.round(sum * 1e6) / 1e3, waitMs, 'the metric and the log line (ms to the µs) agree')
  t.equal(select(m, 'llm_client_write_wait_seconds_bucket', { ...labels, le: '1' })[0]?.value, 0, 'not in the 1 s bucket')

  const debug = (await (await fetch(`${proxy.adminUrl}/debug/requests/${encodeURIComponent(line.request_id as string)}`)).json()) as Record<string, unknown>
  t.equal(debug.client_write_wait_ms, waitMs, '/debug/requests shows the same figure')
})

t.test('a client that reads as fast as it can observes about 0 over a 2 MiB stream', async (t) => {
  const upstream = await streamingUpstream(t, 32)
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  await rawClient(proxy.url, '/up/v1/chat/completions', Number.POSITIVE_INFINITY, 0)
  const [line] = await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_client_write_wait_seconds_count'), 1)
  const sum = sumOf(m, 'llm_client_write_wait_seconds_sum')
  // Far under the slow reader's 2 s: only the moments its socket took to accept each write.
  t.ok(sum < 0.5, `a fast reader waited ${sum} s (log line: ${line.client_write_wait_ms} ms)`)
})

t.test('a small stream a client keeps up with observes exactly 0, and a whole JSON answer observes nothing', async (t) => {
  const upstream = await startUpstream((req, res) => {
    if (req.url?.includes('whole')) {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}')
      return
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end(`${CONTENT}data: [DONE]\n\n`)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  await rawClient(proxy.url, '/up/v1/chat/completions', Number.POSITIVE_INFINITY, 0)
  await rawClient(proxy.url, '/up/whole/v1/chat/completions', Number.POSITIVE_INFINITY, 0)
  const lines = await proxy.waitForRequests(2)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_client_write_wait_seconds_count'), 1, 'the stream only')
  t.equal(sumOf(m, 'llm_client_write_wait_seconds_sum'), 0)
  t.same(
    lines.map((l) => l.client_write_wait_ms),
    [0, undefined],
  )
})
