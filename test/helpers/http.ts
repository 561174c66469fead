import { request } from 'node:http'
import type { ClientRequest, IncomingMessage, OutgoingHttpHeaders } from 'node:http'

export interface RawResponse {
  readonly status: number
  readonly statusMessage: string
  readonly rawHeaders: string[]
  readonly body: Buffer
}

export interface RawRequestOptions {
  readonly method?: string
  readonly headers?: OutgoingHttpHeaders
  readonly body?: string | Buffer
  readonly agent?: false
}

/** Starts a raw request (node:http, so any header can be sent; POST unless told) and resolves with the response head. */
export function openRequest(url: string, opts: RawRequestOptions = {}): Promise<{ res: IncomingMessage; req: ClientRequest }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method ?? 'POST', headers: opts.headers, agent: opts.agent ?? false }, (res) => resolve({ res, req }))
    req.on('error', reject)
    if (opts.body !== undefined) req.end(opts.body)
    else req.end()
  })
}

/** Reads a response to its end: resolves with the bytes, or rejects when the stream breaks. */
export function readAll(res: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = []
    res.on('data', (c: Buffer) => parts.push(c))
    res.on('end', () => resolve(Buffer.concat(parts)))
    res.on('error', reject)
    res.on('aborted', () => reject(new Error('aborted')))
    res.on('close', () => {
      if (!res.complete) reject(new Error('response closed before its end'))
    })
  })
}

/** A whole raw exchange (GET unless told): raw headers and raw (undecoded) body bytes. */
export async function rawRequest(url: string, opts: RawRequestOptions = {}): Promise<RawResponse> {
  const { res } = await openRequest(url, { ...opts, method: opts.method ?? 'GET' })
  const body = await readAll(res)
  return { status: res.statusCode ?? 0, statusMessage: res.statusMessage ?? '', rawHeaders: res.rawHeaders, body }
}

/** Raw headers as [lower-case name, value] pairs, without the ones a hop sets itself. */
export function endToEndHeaders(raw: readonly string[]): [string, string][] {
  const hop = new Set(['connection', 'keep-alive', 'transfer-encoding', 'date'])
  const out: [string, string][] = []
  for (let i = 0; i < raw.length; i += 2) if (!hop.has(raw[i].toLowerCase())) out.push([raw[i].toLowerCase(), raw[i + 1]])
  return out
}
