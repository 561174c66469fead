import t from 'tap'
import type { Test } from 'tap'
import { createServer as createHttpServer } from 'node:http'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { gunzipSync } from 'node:zlib'
import { OTLPExporterError } from '@opentelemetry/otlp-exporter-base'
import { convertLegacyHttpOptions } from '@opentelemetry/otlp-exporter-base/node-http'
import { UndiciOtlpTransport, retryAfterMs, tlsFromEnv } from '../../src/metrics/otel/undici-transport.ts'
import { makeTestCa } from '../helpers/test-ca.ts'

/** What a collector saw of one request. */
interface Seen {
  readonly headers: IncomingMessage['headers']
  readonly body: Buffer
}

/** A real collector on port 0 answering with `answer` (the request's index from 0); every request is kept in `seen`. */
async function collector(t: Test, answer: (i: number, res: ServerResponse) => void, tls?: { cert: Buffer; key: Buffer }): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = []
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      seen.push({ headers: req.headers, body: Buffer.concat(chunks) })
      answer(seen.length - 1, res)
    })
  }
  const server = tls === undefined ? createHttpServer(handler) : createHttpsServer(tls, handler)
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((r) => server.close(() => r()))
  })
  const scheme = tls === undefined ? 'http' : 'https'
  return { url: `${scheme}://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`, seen }
}

/** The settings the SDK resolves for a traces exporter with these options (the standard variables unset). */
const settings = (url: string, more: { headers?: Record<string, string>; compression?: 'gzip' | 'none'; timeoutMillis?: number } = {}) =>
  convertLegacyHttpOptions({ url, ...more } as Parameters<typeof convertLegacyHttpOptions>[0], 'TRACES', 'v1/traces', {
    'Content-Type': 'application/x-protobuf',
  })

const DATA = Uint8Array.from([10, 3, 1, 2, 3])

t.test('an export is one POST of the serialised bytes with the configured headers; a success hands back the answer', async (t) => {
  const c = await collector(t, (_i, res) => res.writeHead(200).end('ok'))
  const transport = new UndiciOtlpTransport(settings(c.url, { headers: { authorization: 'Bearer x' } }))
  t.teardown(() => transport.shutdown())
  const result = await transport.send(DATA, 5000)
  t.same(result, { status: 'success', data: Buffer.from('ok') })
  t.equal(c.seen.length, 1)
  t.same([...c.seen[0].body], [...DATA])
  t.equal(c.seen[0].headers['content-type'], 'application/x-protobuf')
  t.equal(c.seen[0].headers.authorization, 'Bearer x')
  t.equal(c.seen[0].headers['user-agent'], 'tokentap OTel-OTLP-Exporter-JavaScript')
  t.equal(c.seen[0].headers['content-encoding'], undefined)
})

t.test('with gzip compression the body is gzipped and says so', async (t) => {
  const c = await collector(t, (_i, res) => res.writeHead(200).end())
  const transport = new UndiciOtlpTransport(settings(c.url, { compression: 'gzip' }))
  t.teardown(() => transport.shutdown())
  t.same(await transport.send(DATA, 5000), { status: 'success', data: Buffer.alloc(0) })
  t.equal(c.seen[0].headers['content-encoding'], 'gzip')
  t.same([...gunzipSync(c.seen[0].body)], [...DATA])
})

t.test('a busy collector (503) is asked again as its Retry-After says, until it takes the export', async (t) => {
  const c = await collector(t, (i, res) => (i < 2 ? res.writeHead(503, { 'retry-after': '0' }).end() : res.writeHead(200).end()))
  const transport = new UndiciOtlpTransport(settings(c.url))
  t.teardown(() => transport.shutdown())
  t.equal((await transport.send(DATA, 5000)).status, 'success')
  t.equal(c.seen.length, 3, 'two refusals, then the export')
})

t.test('a retry that would come after the export’s timeout is not made: the export is reported retryable', async (t) => {
  // No Retry-After: the first back-off is 1 s ± 20 %, past a 500 ms timeout.
  const c = await collector(t, (_i, res) => res.writeHead(429).end())
  const transport = new UndiciOtlpTransport(settings(c.url))
  t.teardown(() => transport.shutdown())
  const result = await transport.send(DATA, 500)
  t.equal(result.status, 'retryable')
  t.equal(c.seen.length, 1)
})

t.test('a refused export (400) fails at once with the status and the collector’s message', async (t) => {
  const c = await collector(t, (_i, res) => res.writeHead(400).end('bad spans'))
  const transport = new UndiciOtlpTransport(settings(c.url))
  t.teardown(() => transport.shutdown())
  const result = await transport.send(DATA, 5000)
  t.equal(result.status, 'failure')
  const error = result.status === 'failure' ? result.error : undefined
  t.ok(error instanceof OTLPExporterError)
  t.match(error, { message: 'Bad Request', code: 400, data: 'bad spans' })
  t.equal(c.seen.length, 1)
})

t.test('an answer longer than 4 MiB is a failure, not read to its end', async (t) => {
  const c = await collector(t, (_i, res) => res.writeHead(200).end(Buffer.alloc(4 * 1024 * 1024 + 1)))
  const transport = new UndiciOtlpTransport(settings(c.url))
  t.teardown(() => transport.shutdown())
  const result = await transport.send(DATA, 5000)
  t.equal(result.status, 'failure')
  t.match(result.status === 'failure' ? result.error.message : '', /exceeded 4194304 bytes/)
})

t.test('a collector that never answers times out, and none listening is a network error: both retryable', async (t) => {
  const mute = await collector(t, () => {})
  const silent = new UndiciOtlpTransport(settings(mute.url))
  t.teardown(() => silent.shutdown())
  const timedOut = await silent.send(DATA, 200)
  t.same(timedOut, { status: 'retryable', error: new Error('Request timed out') })

  const refused = new UndiciOtlpTransport(settings('http://127.0.0.1:1/v1/traces'))
  t.teardown(() => refused.shutdown())
  const result = await refused.send(DATA, 500)
  t.equal(result.status, 'retryable')
  t.match(result.status === 'retryable' ? result.error : undefined, { code: 'ECONNREFUSED' })
})

t.test('an error no retry can mend (a URL undici cannot send to) fails', async (t) => {
  const transport = new UndiciOtlpTransport(settings('ftp://127.0.0.1:1/v1/traces'))
  t.teardown(() => transport.shutdown())
  t.equal((await transport.send(DATA, 500)).status, 'failure')
})

t.test('an https collector is trusted through the standard certificate variables, client certificate included', async (t) => {
  const ca = makeTestCa()
  t.teardown(() => ca.remove())
  const c = await collector(t, (_i, res) => res.writeHead(200).end(), {
    cert: ca.read(ca.serverCert),
    key: ca.read(ca.serverKey),
  })
  const env = {
    OTEL_EXPORTER_OTLP_CERTIFICATE: '/nonexistent/the-specific-variable-wins.pem',
    OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE: ca.caCert,
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: ca.clientCert,
    OTEL_EXPORTER_OTLP_CLIENT_KEY: ` ${ca.clientKey} `,
  }
  const tls = tlsFromEnv('TRACES', env)
  t.same(tls, { ca: ca.read(ca.caCert), cert: ca.read(ca.clientCert), key: ca.read(ca.clientKey) })
  t.same(tlsFromEnv('TRACES', { OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE: '' }), { ca: undefined, cert: undefined, key: undefined }, 'an empty variable is unset')
  const transport = new UndiciOtlpTransport(settings(c.url), tls)
  t.teardown(() => transport.shutdown())
  t.equal((await transport.send(DATA, 5000)).status, 'success')
  const untrusted = new UndiciOtlpTransport(settings(c.url))
  t.teardown(() => untrusted.shutdown())
  t.equal((await untrusted.send(DATA, 5000)).status, 'failure', 'an unknown CA is no network blip: not retried')
})

t.test('Retry-After in seconds or as an HTTP date, as the SDK reads it', async (t) => {
  t.equal(retryAfterMs(undefined), undefined)
  t.equal(retryAfterMs('3'), 3000)
  t.equal(retryAfterMs(['2', '9']), 2000)
  t.equal(retryAfterMs('0'), -1, 'now')
  t.equal(retryAfterMs(new Date(Date.now() - 60_000).toUTCString()), 0, 'a date passed: now')
  t.equal(retryAfterMs('soon'), 0, 'unreadable: now')
})
