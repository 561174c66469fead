import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * An OTLP/HTTP traces endpoint that answers every export with success and counts them, unread:
 * what the lab's traces tools export to, so the collector's cost is not in their figures.
 */
export async function startTraceSink() {
  let exports = 0
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      exports++
      res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': '0' }).end()
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    exports: () => exports,
    close: () => new Promise<void>((r) => server.close(() => r()).closeAllConnections()),
  }
}
