import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import type { Job } from './load-client.ts'
import { round, sorted } from './stats.ts'

/**
 * The client-abort phase: does a proxy stop reading the upstream when its client goes away?
 * A counting upstream, in the benchmark's own process, streams `chunks` OpenAI-style content
 * events `gapMs` apart and records when it wrote each one and when its response closed. A client
 * reads `after` content events through the path and then destroys its socket; what the upstream
 * wrote after that moment is what the proxy went on reading for a client that was gone (its
 * CPU, the upstream's tokens and, with a real provider, the bill). Paths take turns, one abort at
 * a time, so the upstream's record is the current request's.
 */

const now = (): number => performance.timeOrigin + performance.now()

interface UpstreamRecord {
  readonly writes: number[]
  readonly bytes: number[]
  closedAt: number
  completed: boolean
}

export interface CountingUpstream {
  readonly port: number
  close(): Promise<void>
  /** The latest request's record (undefined before any). */
  latest(): UpstreamRecord | undefined
}

export async function startCountingUpstream(chunks: number, gapMs: number): Promise<CountingUpstream> {
  let last: UpstreamRecord | undefined
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const rec: UpstreamRecord = { writes: [], bytes: [], closedAt: NaN, completed: false }
      last = rec
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      let i = 0
      const event = (delta: string): string =>
        `data: {"id":"chatcmpl-abort","object":"chat.completion.chunk","created":0,"model":"abort-model","tokentap_sent_ms":${now().toFixed(3)},"choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":null}]}\n\n`
      const write = (text: string): void => {
        rec.writes.push(now())
        rec.bytes.push(Buffer.byteLength(text))
        res.write(text)
      }
      write(event('{"role":"assistant","content":""}'))
      const timer = setInterval(() => {
        if (res.destroyed) return
        write(event(`{"content":" w${i}"}`))
        if (++i === chunks) {
          clearInterval(timer)
          rec.completed = true
          res.end('data: [DONE]\n\n')
        }
      }, gapMs)
      res.on('close', () => {
        clearInterval(timer)
        rec.closedAt = now()
      })
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    port: (server.address() as AddressInfo).port,
    latest: () => last,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections()
        server.close(() => r())
      }),
  }
}

export interface AbortFigures {
  /** Content events the upstream wrote after the client left (median of the rounds). */
  readonly chunks_after_abort: number
  readonly bytes_after_abort: number
  /** How long the upstream response stayed open after the client left, ms (median). */
  readonly upstream_open_ms_after_abort: number
  /** Rounds in which the proxy read the upstream to its end although the client was gone. */
  readonly read_to_end: number
  readonly rounds: number
  readonly chunks_before_abort: number
}

export interface AbortDeps {
  job<T>(job: Job): Promise<T>
  /** Per path: the job reaching the counting upstream through it. */
  readonly jobs: Readonly<Record<string, Extract<Job, { kind: 'abort' }>>>
  readonly upstream: CountingUpstream
  readonly rounds: number
  /** The upstream's whole stream, ms: the longest a proxy can keep it open. */
  readonly streamMs: number
}

export async function abortPhase(d: AbortDeps): Promise<Record<string, AbortFigures>> {
  const paths = Object.keys(d.jobs)
  const runs: Record<string, { chunks: number[]; bytes: number[]; openMs: number[]; toEnd: number; before: number[] }> = Object.fromEntries(
    paths.map((p) => [p, { chunks: [], bytes: [], openMs: [], toEnd: 0, before: [] }]),
  )
  for (let r = 0; r < d.rounds; r++) {
    for (const p of paths) {
      const { at, chunks } = await d.job<{ at: number; chunks: number }>(d.jobs[p])
      // Until the upstream's response closed (the proxy let go) or its stream could have ended.
      const rec = d.upstream.latest()
      for (let i = 0; i < d.streamMs / 50 + 20 && rec !== undefined && Number.isNaN(rec.closedAt); i++) await new Promise((res) => setTimeout(res, 50))
      if (rec === undefined) continue
      let n = 0
      let bytes = 0
      // The role event is index 0: content events are the rest.
      for (let i = 1; i < rec.writes.length; i++) {
        if (rec.writes[i] <= at) continue
        n++
        bytes += rec.bytes[i]
      }
      runs[p].chunks.push(n)
      runs[p].bytes.push(bytes)
      runs[p].openMs.push(Math.max(0, (Number.isNaN(rec.closedAt) ? now() : rec.closedAt) - at))
      runs[p].before.push(chunks)
      if (rec.completed) runs[p].toEnd++
      await new Promise((res) => setTimeout(res, 100))
    }
  }
  const med = (xs: number[]): number => {
    const a = sorted(xs)
    return a.length === 0 ? NaN : a[Math.floor((a.length - 1) / 2)]
  }
  return Object.fromEntries(
    paths.map((p) => [
      p,
      {
        chunks_after_abort: med(runs[p].chunks),
        bytes_after_abort: med(runs[p].bytes),
        upstream_open_ms_after_abort: round(med(runs[p].openMs), 1),
        read_to_end: runs[p].toEnd,
        rounds: runs[p].chunks.length,
        chunks_before_abort: med(runs[p].before),
      },
    ]),
  )
}
