import { request as httpRequest } from 'node:http'
import { createServer } from 'node:net'
import type { AddressInfo, Socket } from 'node:net'
import { PassThrough } from 'node:stream'
import t from 'tap'
import type { Test } from 'tap'
import { select, sumOf } from '../helpers/prometheus.ts'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { continueLength, skipUnsolicitedContinue } from '../../src/proxy/unsolicited-continue.ts'
import { chatEvent } from '../helpers/faults.ts'
import { portOf, rawExchange, startRawUpstream } from '../helpers/raw-socket.ts'
import type { RawUpstream } from '../helpers/raw-socket.ts'

/** A raw upstream that answers every request with `head` (status line and headers, bytes as given) and `body`. */
async function answering(head: Buffer | string, body = ''): Promise<RawUpstream> {
  return startRawUpstream((socket) => {
    socket.write(Buffer.concat([Buffer.isBuffer(head) ? head : Buffer.from(head, 'latin1'), Buffer.from(body)]))
  })
}

const get = (proxy: RunningProxy, path = '/up/v1/chat/completions'): Promise<Buffer> =>
  rawExchange(portOf(proxy.url), `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`)

const statusLine = (b: Buffer): Buffer => b.subarray(0, b.indexOf('\r\n'))

async function nothingInFlight(t: Test, proxy: RunningProxy): Promise<void> {
  const m = await proxy.scrape()
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
    'nothing left in flight',
  )
  const snap = (await (await fetch(`${proxy.adminUrl}/debug/streams`)).json()) as { in_flight: number; streams: unknown[] }
  t.same([snap.in_flight, snap.streams.length], [0, 0], '/debug/streams is empty')
}

t.test('a status line Node cannot write gets a 502 JSON error at once and leaves nothing in flight', async (t) => {
  const cases: [string, Buffer][] = [
    ['a control byte', Buffer.from('HTTP/1.1 200 O\x01K\r\n', 'latin1')],
    ['a lone 0x80', Buffer.from('HTTP/1.1 200 OK\x80\r\n', 'latin1')],
    ['a lone 0xff', Buffer.from('HTTP/1.1 200 \xffOK\r\n', 'latin1')],
    ['a broken UTF-8 sequence', Buffer.from('HTTP/1.1 200 R\xc3ussi\r\n', 'latin1')],
  ]
  for (const [what, line] of cases) {
    const upstream = await answering(Buffer.concat([line, Buffer.from('content-type: text/event-stream\r\ncontent-length: 0\r\n\r\n')]))
    const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
    const res = await get(proxy)
    const text = res.toString('latin1')
    t.match(text, /^HTTP\/1\.1 502 Bad Gateway\r\n/, `${what}: 502`)
    t.match(text, /\r\n\r\n\{"error":\{"message":"[^"]+","type":"proxy_error","code":"TOKENTAP_ERR_UPSTREAM_(BAD_RESPONSE|FAILED)"\}\}$/, `${what}: the proxy's JSON error`)
    const [logLine] = await proxy.waitForRequests(1)
    t.equal(logLine.outcome, 'error')
    await nothingInFlight(t, proxy)
    const m = await proxy.scrape()
    t.equal(sumOf(m, 'llm_requests_total', { status_code: '502' }), 1, `${what}: counted once, as a 502`)
    await proxy.close()
    await upstream.close()
  }
})

t.test('the reason phrase reaches the client byte for byte, UTF-8 included', async (t) => {
  for (const reason of ['Réussi', 'OK ✓', 'Sehr gut', 'ÖK with Ünïcödé — fine']) {
    const line = Buffer.from(`HTTP/1.1 200 ${reason}`, 'utf8')
    const upstream = await answering(Buffer.concat([line, Buffer.from('\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok')]))
    const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
    const res = await get(proxy)
    t.equal(statusLine(res).toString('hex'), line.toString('hex'), `"${reason}": the same bytes`)
    t.ok(res.subarray(res.length - 2).equals(Buffer.from('ok')), 'and the body')
    await proxy.close()
    await upstream.close()
  }
})

t.test('103 Early Hints is relayed and 102 dropped before an intact, measured final response', async (t) => {
  const body = `${chatEvent(' the') + chatEvent(' end')}data: [DONE]\n\n`
  const upstream = await answering(
    'HTTP/1.1 102 Processing\r\n\r\n' +
      'HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n' +
      `HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n`,
    body,
  )
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const text = (await get(proxy)).toString('utf8')
  const heads = text.split('\r\n\r\n')
  t.match(heads[0], /^HTTP\/1\.1 103 Early Hints\r\n[Ll]ink: <\/style\.css>; rel=preload; as=style$/, 'the hints came first')
  t.match(heads[1], /^HTTP\/1\.1 200 OK\r\n/, 'then the final response; no 102')
  t.notOk(text.includes('102'), '102 was dropped')
  t.ok(text.endsWith(`\r\n\r\n${body}`), 'the final body is intact')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'ok')
  t.equal(line.status, 200)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count'), 1, 'measured: TTFT recorded')
  t.equal(sumOf(m, 'llm_output_tokens_total'), 2)
  await nothingInFlight(t, proxy)
})

t.test('an HTTP/1.0 client gets no 103, only the final response', async (t) => {
  const upstream = await answering('HTTP/1.1 103 Early Hints\r\nLink: </a.js>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n', 'ok')
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const text = (await rawExchange(portOf(proxy.url), 'GET /up/x HTTP/1.0\r\nHost: x\r\n\r\n')).toString('latin1')
  t.match(text, /^HTTP\/1\.1 200 OK\r\n/)
  t.ok(text.endsWith('\r\n\r\nok'))
})

t.test('an unsolicited 100 Continue from the upstream is skipped: the final response reaches the client, measured, counted once', async (t) => {
  // undici destroys the connection on any 100 (lib/dispatcher/client-h1.js, onHeadersComplete),
  // though RFC 9110 §15.2 has a client parse unexpected 1xx; tokentap's connections skip it
  // (src/proxy/unsolicited-continue.ts). tokentap never sends `Expect` upstream, so a 100 is
  // always unsolicited.
  // A connection per request: `answering` answers one request a connection.
  const upstream = await answering('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\n', 'ok')
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const plain = (await get(proxy)).toString('latin1')
  t.match(plain, /^HTTP\/1\.1 200 OK\r\n/, 'the final status, no 100')
  t.ok(plain.endsWith('\r\n\r\nok'), 'and its body')

  // A client's own `Expect: 100-continue` is answered by tokentap's listener and never goes upstream.
  const body = '{}'
  const expecting = (
    await rawExchange(portOf(proxy.url), `POST /up/v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`)
  ).toString('latin1')
  t.match(expecting, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/, "the listener's own 100, then the upstream's 200")
  t.ok(expecting.endsWith('\r\n\r\nok'))
  t.same(
    upstream.heads.map((h) => /\r\nexpect:/i.test(h)),
    [false, false],
    'no Expect header reached the upstream',
  )

  const lines = await proxy.waitForRequests(2)
  t.same(
    lines.map((l) => [l.outcome, l.status]),
    [
      ['ok', 200],
      ['ok', 200],
    ],
  )
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'ok', status_code: '200' }), 2)
  t.equal(sumOf(m, 'llm_requests_total'), 2)
  await nothingInFlight(t, proxy)
})

t.test('100s in pieces, with headers, several in a row, on a kept-alive connection: skipped each time, and a body that looks like one is left intact', async (t) => {
  const lookalike = 'HTTP/1.1 100 Continue\r\n\r\n'
  const events = [chatEvent(' one'), lookalike, chatEvent(' two'), 'data: [DONE]\n\n']
  const bodyText = events.join('')
  const pause = (): Promise<void> => new Promise((r) => setTimeout(r, 5))
  let requests = 0
  const server = createServer((socket) => {
    socket.on('error', () => {})
    let buf = ''
    let writing = Promise.resolve()
    socket.on('data', (c: Buffer) => {
      buf += c.toString('latin1')
      for (let end = buf.indexOf('\r\n\r\n'); end >= 0; end = buf.indexOf('\r\n\r\n')) {
        // Every request carries the two-byte body `{}`.
        buf = buf.slice(end + 4 + 2)
        requests++
        writing = writing.then(async () => {
          // A 100 a byte at a time, one with a header, one whole; then the final head and body, an event per write.
          for (const b of 'HTTP/1.1 100 Continue\r\n\r\n') {
            socket.write(b)
            await pause()
          }
          socket.write('HTTP/1.0 100 Keep going\r\nX-Note: still thinking\r\n\r\n')
          await pause()
          socket.write(`HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: ${Buffer.byteLength(bodyText)}\r\n\r\n`)
          for (const e of events) {
            await pause()
            socket.write(e)
          }
        })
      }
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }] })
  t.teardown(() => proxy.close())
  for (let i = 0; i < 2; i++) {
    const res = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
    t.equal(res.status, 200, `request ${i + 1}: the final status`)
    t.equal(await res.text(), bodyText, `request ${i + 1}: the body byte for byte, its 100 look-alike included`)
  }
  t.equal(requests, 2)
  const lines = await proxy.waitForRequests(2)
  t.same(
    lines.map((l) => [l.outcome, l.status, l.output_tokens]),
    [
      ['ok', 200, 2],
      ['ok', 200, 2],
    ],
  )
  await nothingInFlight(t, proxy)
})

t.test('a request body still being sent while the response streams back does not re-arm the 100 check: a body event that looks like a 100 arrives intact', { timeout: 20_000 }, async (t) => {
  const lookalike = 'HTTP/1.1 100 Continue\r\n\r\n'
  const first = chatEvent(' early')
  const rest = `${lookalike}${chatEvent(' late')}data: [DONE]\n\n`
  const bodyText = first + rest
  const server = createServer((socket) => {
    socket.on('error', () => {})
    let buf = ''
    let answered = false
    socket.on('data', (c: Buffer) => {
      buf += c.toString('latin1')
      if (!answered && buf.includes('\r\n\r\n')) {
        // Answer at the request head, before the body has come.
        answered = true
        socket.write(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: ${Buffer.byteLength(bodyText)}\r\n\r\n${first}`)
      }
      // The chunked body's end: the rest of the answer, the look-alike first, in a write of its own.
      if (answered && buf.endsWith('0\r\n\r\n')) socket.write(rest)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }] })
  t.teardown(() => proxy.close())
  const text = await new Promise<string>((resolve, reject) => {
    const req = httpRequest(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
      let got = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => {
        got += c
        // The first event is through: now the rest of the request body goes upstream.
        if (got === first) req.end('"messages":[]}')
      })
      res.on('end', () => resolve(got))
    })
    req.on('error', reject)
    req.write('{"model":"gpt-4o",')
  })
  t.equal(text, bodyText, 'the body byte for byte, its 100 look-alike included')
  const [line] = await proxy.waitForRequests(1)
  t.same([line.outcome, line.status, line.output_tokens], ['ok', 200, 2])
})

t.test('skipUnsolicitedContinue: a 100 split across reads is held and dropped, the final response handed over whole, later reads untouched until the next request head', async (t) => {
  // A stream standing in for the socket: read() and write() as undici calls them, no network, no clock.
  const socket = new PassThrough()
  const written: string[] = []
  const readAll = (): string => {
    let out = ''
    for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read() as Buffer | null) out += chunk.toString('latin1')
    return out
  }
  const feed = (s: string): void => {
    socket.push(Buffer.from(s, 'latin1'))
  }
  socket.write = ((data: string) => {
    written.push(data)
    return true
  }) as never
  skipUnsolicitedContinue(socket as unknown as Socket)
  socket.write('POST /x HTTP/1.1\r\nhost: u\r\n\r\n', 'latin1')
  feed('HTTP/1.1 10')
  t.equal(readAll(), '', 'undecided bytes are held')
  feed('0 Continue\r\nX-A: b\r\n')
  t.equal(readAll(), '', 'a 100 without its end is held')
  feed('\r\nHTTP/1.1 200 OK\r\ncontent-length: 27\r\n\r\n')
  t.equal(readAll(), 'HTTP/1.1 200 OK\r\ncontent-length: 27\r\n\r\n', 'the 100 dropped, the final head handed over')
  feed('HTTP/1.1 100 Continue\r\n\r\n')
  t.equal(readAll(), 'HTTP/1.1 100 Continue\r\n\r\n', 'body bytes are never looked at')
  socket.write('\r\n5\r\n', 'latin1')
  feed('HTTP/1.1 100 Continue\r\n\r\n')
  t.equal(readAll(), 'HTTP/1.1 100 Continue\r\n\r\n', 'chunked framing written meanwhile does not re-arm the check')
  socket.write('GET /y HTTP/1.1\r\nhost: u\r\n\r\n', 'latin1')
  feed('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n')
  t.equal(readAll(), 'HTTP/1.1 204 No Content\r\n\r\n', 'the next request head re-arms it')
  t.equal(written.length, 3)
})

t.test('continueLength finds a 100 response at the start of the bytes, waits on a start that may become one, and refuses anything else', async (t) => {
  const len = (s: string): number => continueLength(Buffer.from(s, 'latin1'))
  t.equal(len('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK'), 25)
  t.equal(len('HTTP/1.0 100\r\n\r\n'), 16, 'no reason phrase')
  t.equal(len('HTTP/1.1 100 Continue\r\nA: b\r\n\r\n'), 31, 'with a header')
  for (const start of ['', 'H', 'HTTP/1.', 'HTTP/1.1 10', 'HTTP/1.1 100 ', 'HTTP/1.1 100 Continue\r\n']) t.equal(len(start), 0, `${JSON.stringify(start)}: undecided`)
  for (const other of ['HTTP/1.1 200 OK\r\n\r\n', 'HTTP/1.1 1000 x', 'HTTP/1.1 103 Early', 'HTTP/2 100 ', 'data: HTTP/1.1 100', 'x']) t.equal(len(other), -1, `${JSON.stringify(other)}: not a 100`)
  t.equal(len(`HTTP/1.1 100 Continue\r\nX: ${'a'.repeat(20_000)}`), -1, 'a header block past 16 KiB is not waited for')
})
