import type { Server } from 'node:http'

/**
 * Settings of the proxy's own HTTP listener that keep it transparent.
 *
 * Node's server keeps only about the first 1,000 request header lines by default
 * (`maxHeadersCount`) and drops the rest without a word, so a request with 1,500 headers went
 * upstream cut short. With no count limit every header is forwarded; the total size stays bounded
 * by Node's `maxHeaderSize` (16 KiB by default, `--max-http-header-size`), beyond which the client
 * gets 431 before any byte goes upstream.
 */
export function configureListener(server: Server): void {
  server.maxHeadersCount = 0
}
