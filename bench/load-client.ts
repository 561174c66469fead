import http from 'node:http'
import { performance } from 'node:perf_hooks'
import { createGunzip } from 'node:zlib'

/**
 * The benchmark's load generator, in its own process (forked by bench/run.ts, driven over IPC).
 * The simulator stamps each event with its send time (`tokentap_sent_ms`), so each chunk's one-way
 * delay and each gap's distortion are exact up to the clocks' common offset, which cancels.
 */

/** ms: TTFT (request sent → first content event), each content event's one-way delay, |client gap − sender gap| after the first. */
export interface StreamResult {
  readonly ok: boolean
  readonly ttft: number
  readonly delays: number[]
  readonly distortions: number[]
  readonly chunks: number
  readonly id: string
}

export type Job =
  | { kind: 'streams'; url: string; body: string; bodies?: string[]; count: number; concurrency: number; phaseMs: number; idPrefix: string; detail: boolean; headers?: Record<string, string> }
  | { kind: 'hold'; url: string; body: string; bodies?: string[]; count: number; until?: number; headers?: Record<string, string>; timeoutMs?: number; rampPerTick?: number }
  | { kind: 'events' }
  | { kind: 'release' }
  | { kind: 'drain'; timeoutMs: number }
  | { kind: 'stop' }
  | { kind: 'get'; url: string; times: number; inspect?: boolean; accept?: string; gzip?: boolean }

/** Timed scrapes; with `inspect`, one more (untimed) scrape is counted: llm_ histogram series (`_count` lines), llm_ series, sample lines. */
export interface ScrapeResult {
  readonly ms: number[]
  /** Decompressed, and on the wire. */
  readonly bytes: number
  readonly wireBytes: number
  readonly histogramSeries: number
  readonly llmSeries: number
  readonly samples: number
  /** Which format the server chose for the Accept sent. */
  readonly contentType: string
}

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 4096 })
/** Content events received by every stream of this process so far (the `events` job). */
let contentEvents = 0
const now = (): number => performance.timeOrigin + performance.now()
const SENT = '"tokentap_sent_ms":'
const CONTENT = '"delta":{"content":"'

type Open = { req: http.ClientRequest; res?: http.IncomingMessage }
let held: Open[] = []
/** The held streams' ends (for `drain`). */
let heldEnds: Promise<StreamResult>[] = []

/** One streamed request; resolves when the response ends (or fails). */
function stream(url: string, body: string, id: string, detail: boolean, headers: Record<string, string> = {}, onFirst?: () => void, keep?: Open[], firstAt = 1): Promise<StreamResult> {
  return new Promise((resolve) => {
    const delays: number[] = []
    const distortions: number[] = []
    let chunks = 0
    let ttft = NaN
    let prevSent = NaN
    let prevArrival = NaN
    let carry = ''
    let settled = false
    const done = (ok: boolean): void => {
      if (settled) return
      settled = true
      resolve({ ok, ttft, delays, distortions, chunks, id })
    }
    const u = new URL(url)
    const reqHeaders = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-request-id': id, ...headers }
    const req = http.request({ agent, host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: reqHeaders })
    const open: Open = { req }
    keep?.push(open)
    req.on('socket', (s) => s.setNoDelay(true))
    req.on('error', () => done(false))
    let start = 0
    req.on('response', (res) => {
      open.res = res
      res.on('data', (buf: Buffer) => {
        const arrival = now()
        carry += buf.toString('latin1')
        let from = 0
        for (;;) {
          const end = carry.indexOf('\n\n', from)
          if (end < 0) break
          const c = carry.indexOf(CONTENT, from)
          if (c >= 0 && c < end && carry.charCodeAt(c + CONTENT.length) !== 34 /* " */) {
            chunks++
            contentEvents++
            if (chunks === 1) ttft = arrival - start
            if (chunks === firstAt) onFirst?.()
            if (detail) {
              const s = carry.indexOf(SENT, from)
              const sent = Number(carry.slice(s + SENT.length, carry.indexOf(',', s)))
              delays.push(arrival - sent)
              if (chunks > 1) distortions.push(Math.abs(arrival - prevArrival - (sent - prevSent)))
              prevSent = sent
              prevArrival = arrival
            }
          }
          from = end + 2
        }
        carry = carry.slice(from)
      })
      res.on('end', () => done(res.statusCode === 200))
      res.on('error', () => done(false))
      res.on('close', () => done(res.complete && res.statusCode === 200))
    })
    start = now()
    req.end(body)
  })
}

/** Set by a `stop` job: running `streams` jobs start no further requests. */
let stopped = false

async function streams(job: Extract<Job, { kind: 'streams' }>): Promise<StreamResult[]> {
  stopped = false
  const out: StreamResult[] = []
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < job.count && !stopped) {
      const i = next++
      if (job.phaseMs > 0) await new Promise((r) => setTimeout(r, Math.random() * job.phaseMs))
      const body = job.bodies === undefined ? job.body : job.bodies[i % job.bodies.length]
      out.push(await stream(job.url, body, `${job.idPrefix}-${i}`, job.detail, job.headers))
    }
  }
  await Promise.all(Array.from({ length: Math.min(job.concurrency, job.count) }, worker))
  return out
}

/**
 * Opens `count` streams, read as they come, and resolves once each has delivered `until` content
 * events (default 1), or with how many had after `timeoutMs` (default 30 s); they stay open until
 * `release`. `bodies` are taken in turn (streams with different plans); `rampPerTick` opens at
 * most that many per 10 ms (thousands of connects at once overflow a listener's backlog, and
 * each dropped SYN waits a second to be sent again).
 */
async function hold(job: Extract<Job, { kind: 'hold' }>): Promise<number> {
  let first = 0
  let done: (n: number) => void = () => {}
  const all = new Promise<number>((resolve) => (done = resolve))
  const timer = setTimeout(() => done(first), job.timeoutMs ?? 30_000)
  for (let i = 0; i < job.count; i++) {
    if (job.rampPerTick !== undefined && i > 0 && i % job.rampPerTick === 0) await new Promise((r) => setTimeout(r, 10))
    const body = job.bodies === undefined ? job.body : job.bodies[i % job.bodies.length]
    const onFirst = (): void => void (++first === job.count && done(first))
    heldEnds.push(stream(job.url, body, `hold-${i}`, false, job.headers, onFirst, held, job.until ?? 1))
  }
  const n = await all
  clearTimeout(timer)
  return n
}

function release(): number {
  const n = held.length
  for (const o of held) {
    o.res?.destroy()
    o.req.destroy()
  }
  held = []
  heldEnds = []
  return n
}

/** Waits for the held streams to end on their own (at most `timeoutMs`), then releases what is left; resolves with how many ended. */
async function drain(job: Extract<Job, { kind: 'drain' }>): Promise<number> {
  let ended = 0
  const all = Promise.all(heldEnds.map((p) => p.then(() => void ended++)))
  await Promise.race([all, new Promise((r) => setTimeout(r, job.timeoutMs))])
  release()
  return ended
}

/** Timed GETs (the /metrics scrape as Prometheus sees it: request → whole body). */
async function get(job: Extract<Job, { kind: 'get' }>): Promise<ScrapeResult> {
  const ms: number[] = []
  let bytes = 0
  let wireBytes = 0
  let contentType = ''
  const headers: Record<string, string> = {}
  if (job.accept !== undefined) headers.accept = job.accept
  if (job.gzip === true) headers['accept-encoding'] = 'gzip'
  // Time to the whole exposition, decompressed as a scraper must before parsing it.
  const fetchBody = (keep: boolean): Promise<{ n: number; text: string }> =>
    new Promise((resolve, reject) => {
      http
        .get(job.url, { agent, headers }, (res) => {
          let n = 0
          let wire = 0
          contentType = res.headers['content-type'] ?? ''
          const parts: Buffer[] = []
          res.on('data', (b: Buffer) => (wire += b.length))
          const body = res.headers['content-encoding'] === 'gzip' ? res.pipe(createGunzip()) : res
          body.on('data', (b: Buffer) => {
            n += b.length
            if (keep) parts.push(b)
          })
          body.on('end', () => {
            wireBytes = wire
            resolve({ n, text: keep ? Buffer.concat(parts).toString('latin1') : '' })
          })
          body.on('error', reject)
          res.on('error', reject)
        })
        .on('error', reject)
    })
  // Which scrape failed, with what: a body cut short reads only "aborted".
  const failed = (which: string) => (err: unknown) => Promise.reject(new Error(`GET ${job.url} (accept ${job.accept ?? '*/*'}), ${which}: ${String(err)}`))
  for (let i = 0; i < job.times; i++) {
    const t0 = performance.now()
    bytes = (await fetchBody(false).catch(failed(`scrape ${i + 1} of ${job.times}`))).n
    ms.push(performance.now() - t0)
  }
  let histogramSeries = 0
  let llmSeries = 0
  let samples = 0
  if (job.inspect === true) {
    const { text } = await fetchBody(true).catch(failed('the counted scrape'))
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue
      samples++
      if (!line.startsWith('llm_')) continue
      const name = line.slice(0, line.search(/[{ ]/))
      if (name.endsWith('_count')) {
        histogramSeries++
        llmSeries++
      } else if (!name.endsWith('_bucket') && !name.endsWith('_sum')) llmSeries++
    }
  }
  return { ms, bytes, wireBytes, histogramSeries, llmSeries, samples, contentType }
}

const stop = (): boolean => {
  stopped = true
  return true
}
const JOBS: Record<Job['kind'], (job: never) => unknown> = { streams, hold, release, drain, stop, get, events: () => contentEvents }

process.on('message', (msg: { id: number; job: Job }) => {
  Promise.resolve(JOBS[msg.job.kind](msg.job as never)).then(
    (result) => process.send?.({ id: msg.id, result }),
    (err: unknown) => process.send?.({ id: msg.id, error: String((err as Error).stack ?? err) }),
  )
})
process.on('disconnect', () => process.exit(0))
