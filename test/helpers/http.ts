import { request } from 'node:http'

export interface RawResponse {
  readonly status: number
  readonly statusMessage: string
  readonly rawHeaders: string[]
  readonly body: Buffer
}

/** A plain node:http request that keeps raw headers and raw (undecoded) body bytes. */
export function rawRequest(url: string, opts: { method?: string; headers?: Record<string, string | string[]>; body?: string | Buffer } = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method ?? 'GET', headers: opts.headers, agent: false }, (res) => {
      const parts: Buffer[] = []
      res.on('data', (c: Buffer) => parts.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, statusMessage: res.statusMessage ?? '', rawHeaders: res.rawHeaders, body: Buffer.concat(parts) }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(opts.body)
  })
}

/** Raw headers as [lower-case name, value] pairs, without the ones a hop sets itself. */
export function endToEndHeaders(raw: readonly string[]): [string, string][] {
  const hop = new Set(['connection', 'keep-alive', 'transfer-encoding', 'date'])
  const out: [string, string][] = []
  for (let i = 0; i < raw.length; i += 2) if (!hop.has(raw[i].toLowerCase())) out.push([raw[i].toLowerCase(), raw[i + 1]])
  return out
}
