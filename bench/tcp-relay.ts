import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'

/**
 * The bench's TCP relay: one upstream connection per client connection, bytes copied both ways
 * with backpressure, no HTTP at all: what having a Node process in the path costs.
 * `--port 0 --upstream URL`; prints `{"port":N}`.
 */

const { values } = parseArgs({ options: { port: { type: 'string', default: '0' }, upstream: { type: 'string' } } })
if (values.upstream === undefined) throw new Error('--upstream is required')
const upstream = new URL(values.upstream)

const server = net.createServer({ noDelay: true }, (client) => {
  const origin = net.connect({ host: upstream.hostname, port: Number(upstream.port), noDelay: true })
  client.pipe(origin)
  origin.pipe(client)
  // Either side gone: so is the other (an HTTP proxy would answer 502; here the client sees a reset).
  const close = (): void => {
    client.destroy()
    origin.destroy()
  }
  client.on('error', close).on('close', close)
  origin.on('error', close).on('close', close)
})
server.listen(Number(values.port), '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`)
})
