/**
 * Fault soak: mixed traffic through a real tokentap process for a set time, with a hostile
 * upstream (resets, stalls, 1xx answers, status lines Node cannot write, oversize events, gzip
 * bombs) and hostile clients (aborts at random points, slow readers), a scrape every second and
 * a SIGTERM at the end. It reports what it survived and returns the problems it found. The
 * first round of requests is one of each kind (its abort fires on the first body bytes), so even
 * a run of a few seconds exercises every fault; a kind whose fault never happened is a problem.
 *
 *   npm run soak -- --faults            10 minutes
 *   npm run soak -- --faults --quick    2 minutes
 *
 * test/e2e/fault-soak.test.ts runs it for a few seconds inside `npm test`.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import type { AddressInfo, Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { Agent, request } from 'undici'
import { createRng } from '../../src/sim/rng.ts'

export interface FaultSoakOptions {
  /** How long traffic runs. */
  readonly seconds: number
  /** Concurrent clients. */
  readonly concurrency: number
  /** Command and arguments that start tokentap (the config file path is appended after `--config`). */
  readonly server: readonly string[]
  /** Seed of the traffic mix (a run is repeatable up to timing). */
  readonly seed?: number
  /** Uncompressed size of a gzip bomb. */
  readonly bombBytes?: number
  /** Progress lines (default: none). */
  readonly log?: (line: string) => void
}

export interface FaultSoakReport {
  /** Requests by kind and what the client saw. */
  readonly outcomes: Record<string, number>
  /** Per kind (and `sim`), the requests in which its fault really happened (an abort that fired, a stall cut, …). */
  readonly exercised: Record<Kind | 'sim', number>
  readonly requests: number
  /** Normal streams whose bytes were compared with the upstream's, and how many differed. */
  readonly compared: number
  readonly mismatched: number
  readonly inFlightAtEnd: number
  readonly debugStreamsAtEnd: number
  /** Proxy sockets, client side (to its listener) and upstream side, at rest before and after. */
  readonly socketsBefore: { client: number; upstream: number }
  readonly socketsAfter: { client: number; upstream: number }
  readonly rssStartMb: number
  readonly rssEndMb: number
  /** The longest event-loop delay the proxy reported over all scrapes (prom-client's lag max). */
  readonly maxEventLoopStallMs: number
  readonly scrapes: number
  readonly exitCode: number | string
  readonly exitMs: number
  readonly problems: string[]
}

const KINDS = ['normal', 'normal', 'normal', 'normal', 'slow', 'abort', 'abort', 'reset', 'stall', 'info', 'badstatus', 'utf8status', 'oversize', 'bomb'] as const
export type Kind = (typeof KINDS)[number]
/** Every kind once, and the simulator route: the first round of requests, so that even a run of a few seconds exercises each. */
export const EVERY_KIND: readonly (Kind | 'sim')[] = [...new Set(KINDS), 'sim']

const IDLE_TIMEOUT_MS = 3000
const DRAIN_SECONDS = 2

/** The simulator's seeded generator (mulberry32): the mix and every body are reproducible. */
const rng = createRng

const event = (text: string): string =>
  `data: {"id":"s","object":"chat.completion.chunk","created":1,"model":"soak","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"finish_reason":null}]}\n\n`

/** The writes (with a delay before each) of a normal stream for `seed`; the client must get their concatenation. */
function normalWrites(seed: number, oversize: boolean): { delayMs: number; data: string }[] {
  const r = rng(seed)
  const n = 3 + Math.floor(r() * 20)
  const out: { delayMs: number; data: string }[] = []
  for (let i = 0; i < n; i++) {
    let data = event(` w${seed % 1000}_${i}`)
    if (r() < 0.3) data += event(` b${i}`) // a burst: two events in one write
    out.push({ delayMs: Math.floor(r() * 15), data })
    if (oversize && i === 1) out.push({ delayMs: 0, data: event('x'.repeat(2 * 1024 * 1024)) })
  }
  out.push({ delayMs: 0, data: 'data: [DONE]\n\n' })
  return out
}

const chunk = (s: string | Buffer): Buffer => {
  const b = typeof s === 'string' ? Buffer.from(s) : s
  return Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')])
}
const SSE_HEAD = 'content-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n'
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

/** The hostile upstream: raw TCP, keep-alive, behaviour chosen by the query (`?kind=…&seed=…`). */
async function startUpstream(bomb: Buffer): Promise<{ port: number; open: () => number; close: () => Promise<void> }> {
  const sockets = new Set<Socket>()
  const server = createServer((socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => {})
    let buf = Buffer.alloc(0)
    let busy = false
    const next = (): void => {
      if (busy || socket.destroyed) return
      const end = buf.indexOf('\r\n\r\n')
      if (end < 0) return
      const head = buf.subarray(0, end).toString('latin1')
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0)
      if (buf.length < end + 4 + length) return
      buf = buf.subarray(end + 4 + length)
      const target = head.slice(head.indexOf(' ') + 1, head.indexOf(' HTTP/'))
      const q = new URLSearchParams(target.slice(target.indexOf('?') + 1))
      busy = true
      void answer(socket, q.get('kind') as Kind, Number(q.get('seed')), bomb).then(() => {
        busy = false
        next()
      })
    }
    socket.on('data', (c: Buffer) => {
      buf = Buffer.concat([buf, c])
      next()
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    port: (server.address() as AddressInfo).port,
    open: () => sockets.size,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy()
        server.close(() => r())
      }),
  }
}

async function answer(socket: Socket, kind: Kind, seed: number, bomb: Buffer): Promise<void> {
  const write = (b: string | Buffer): void => {
    if (!socket.destroyed) socket.write(b)
  }
  const stream = async (status: string, oversize = false): Promise<void> => {
    write(`${status}\r\n${SSE_HEAD}\r\n`)
    for (const w of normalWrites(seed, oversize)) {
      if (w.delayMs > 0) await sleep(w.delayMs)
      if (socket.destroyed) return
      write(chunk(w.data))
    }
    write('0\r\n\r\n')
  }
  switch (kind) {
    case 'normal':
    case 'slow':
    case 'abort':
      return stream('HTTP/1.1 200 OK')
    case 'oversize':
      return stream('HTTP/1.1 200 OK', true)
    case 'utf8status':
      return stream('HTTP/1.1 200 Réussi'.replace('é', Buffer.from('é', 'utf8').toString('latin1')))
    case 'info':
      // An unsolicited 100 (skipped), a 102 (dropped) and a 103 (relayed) before the final answer.
      write('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </soak.css>; rel=preload; as=style\r\n\r\n')
      await sleep(2)
      return stream('HTTP/1.1 200 OK')
    case 'reset':
      write(`HTTP/1.1 200 OK\r\n${SSE_HEAD}\r\n`)
      write(chunk(event(' before')))
      await sleep(5)
      write(chunk(event(' reset')))
      await sleep(5)
      socket.resetAndDestroy()
      return
    case 'stall':
      write(`HTTP/1.1 200 OK\r\n${SSE_HEAD}\r\n`)
      write(chunk(event(' then nothing')))
      // Never more: the proxy's idle timeout must end it and close this connection.
      return new Promise((r) => socket.once('close', () => r()))
    case 'badstatus':
      write(Buffer.from(`HTTP/1.1 200 O${seed % 2 === 0 ? '\x01' : '\x80'}K\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}`, 'latin1'))
      return
    case 'bomb':
      write(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\ncontent-length: ${bomb.length}\r\n\r\n`)
      write(bomb)
      return
  }
}

/** Socket inodes of a process, split by what they connect: its listener's clients, or the upstream. */
function proxySockets(pid: number, proxyPort: number, upstreamPort: number): { client: number; upstream: number } {
  const inodes = new Set<string>()
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))
      if (m !== null) inodes.add(m[1])
    } catch {
      // closed while listing
    }
  }
  let client = 0
  let upstream = 0
  for (const table of ['tcp', 'tcp6']) {
    let text = ''
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8')
    } catch {
      continue
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/)
      if (f.length < 10 || !inodes.has(f[9]) || f[3] === '0A' /* LISTEN */) continue
      const local = Number.parseInt(f[1].split(':')[1], 16)
      const remote = Number.parseInt(f[2].split(':')[1], 16)
      if (local === proxyPort) client++
      else if (remote === upstreamPort) upstream++
    }
  }
  return { client, upstream }
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m === null ? NaN : Number(m[1]) / 1024
}

/** Sum of a metric's samples in a Prometheus text scrape. */
function metric(text: string, name: string, reduce: 'sum' | 'max' = 'sum'): number {
  let v = reduce === 'sum' ? 0 : -Infinity
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== ' ' && line[name.length] !== '{')) continue
    const x = Number(line.slice(line.lastIndexOf(' ') + 1))
    v = reduce === 'sum' ? v + x : Math.max(v, x)
  }
  return v
}

export async function runFaultSoak(opts: FaultSoakOptions): Promise<FaultSoakReport> {
  const log = opts.log ?? (() => {})
  const problems: string[] = []
  const bomb = gzipSync(Buffer.alloc(opts.bombBytes ?? 64 * 1024 * 1024))
  const upstream = await startUpstream(bomb)
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-fault-soak-'))
  const configFile = join(dir, 'soak.yaml')
  writeFileSync(
    configFile,
    [
      `server: { host: 127.0.0.1, port: 0, drain_seconds: ${DRAIN_SECONDS} }`,
      'admin: { host: 127.0.0.1, port: 0 }',
      `upstream: { keep_alive_timeout_ms: 1000, idle_timeout_ms: ${IDLE_TIMEOUT_MS}, headers_timeout_ms: 30000 }`,
      'log: { level: info }',
      'routes:',
      `  - { prefix: /up, upstream: "http://127.0.0.1:${upstream.port}" }`,
      '  - { prefix: /sim, simulator: { ttft_ms: 5, itl_ms: 3, tokens: 12, jitter_ms: 2, stall_probability: 0 } }',
      '',
    ].join('\n'),
  )
  const [cmd, ...args] = opts.server
  const child = spawn(cmd, [...args, '--config', configFile], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s))
  const exited = new Promise<number | string>((r) => child.once('exit', (code, signal) => r(code ?? signal ?? -1)))
  const killer = (): void => {
    child.kill('SIGKILL')
  }
  process.once('exit', killer)
  try {
    const listening = await new Promise<{ proxy: string; admin: string }>((resolve, reject) => {
      let text = ''
      child.stdout.setEncoding('utf8').on('data', (s: string) => {
        // Only the start line is needed; the rest is read and dropped (a reader that keeps up).
        if (text === null) return
        text += s
        const m = /\{[^\n]*"msg":"tokentap listening"[^\n]*\}/.exec(text)
        if (m !== null) {
          const l = JSON.parse(m[0]) as { proxy: string; admin: string }
          text = null as unknown as string
          resolve({ proxy: `http://${l.proxy}`, admin: `http://${l.admin}` })
        }
      })
      void exited.then((c) => reject(new Error(`tokentap exited with ${c}: ${stderr.slice(-2000)}`)))
    })
    const pid = child.pid as number
    const proxyPort = Number(new URL(listening.proxy).port)
    const socketsBefore = proxySockets(pid, proxyPort, upstream.port)
    const rssStartMb = rssMb(pid)
    log(`tokentap pid ${pid}: RSS ${rssStartMb.toFixed(1)} MiB; ${opts.concurrency} clients for ${opts.seconds} s`)

    let maxLagMs = 0
    let scrapes = 0
    const scrapeTimer = setInterval(() => {
      void fetch(`${listening.admin}/metrics`)
        .then((r) => r.text())
        .then((text) => {
          scrapes++
          const lag = metric(text, 'nodejs_eventloop_lag_max_seconds', 'max')
          if (Number.isFinite(lag)) maxLagMs = Math.max(maxLagMs, lag * 1000)
        })
        .catch((err: Error) => problems.push(`scrape failed: ${err.message}`))
    }, 1000)

    const agent = new Agent({ keepAliveTimeout: 500, headersTimeout: 30_000, bodyTimeout: 30_000 })
    const outcomes: Record<string, number> = {}
    const exercised = Object.fromEntries(EVERY_KIND.map((k) => [k, 0])) as Record<Kind | 'sim', number>
    /** What the client saw; `fault`: the kind's fault (or normal stream) really happened in this request. */
    const count = (kind: Kind | 'sim', what: string, fault: boolean): void => {
      const k = `${kind}: ${what}`
      outcomes[k] = (outcomes[k] ?? 0) + 1
      if (fault) exercised[kind]++
    }
    let requests = 0
    let compared = 0
    let mismatched = 0
    const r = rng(opts.seed ?? 1)
    const endAt = Date.now() + opts.seconds * 1000
    /** `firstRound`: an abort then fires once the first body bytes came (a mid-stream abort for certain), not at a random point. */
    const one = async (kind: Kind | 'sim', seed: number, firstRound = false): Promise<void> => {
      requests++
      const ac = new AbortController()
      let aborted = false
      const abort = (): void => {
        aborted = true
        ac.abort()
      }
      if (kind === 'abort' && !firstRound) setTimeout(abort, Math.floor(r() * 120)).unref()
      const path = kind === 'sim' ? '/sim/v1/chat/completions' : `/up/v1/chat/completions?kind=${kind}&seed=${seed}`
      const body = JSON.stringify({ model: `soak-${kind}`, stream: true, messages: [{ role: 'user', content: 'soak' }] })
      const parts: Buffer[] = []
      let status = 0
      try {
        const res = await request(`${listening.proxy}${path}`, { method: 'POST', dispatcher: agent, signal: ac.signal, headers: { 'content-type': 'application/json' }, body })
        status = res.statusCode
        for await (const c of res.body) {
          parts.push(c as Buffer)
          if (kind === 'abort' && firstRound && !aborted) abort()
          if (kind === 'slow') await sleep(Math.floor(r() * 30))
        }
      } catch {
        if (aborted) return count(kind, 'aborted by the client', kind === 'abort')
        if ((kind === 'reset' || kind === 'stall') && status === 200) return count(kind, 'broken stream (expected)', true)
        // An upstream reset that comes with the head breaks the client's connection before the
        // head reached it (the proxy destroys the socket the head was still queued on): also a break.
        if (kind === 'reset' && status === 0) return count(kind, 'broken before the head (expected)', true)
        if (kind === 'bomb' && status === 200) return count(kind, 'broken stream', true)
        problems.length < 50 && problems.push(`${kind} seed ${seed}: the stream broke (status ${status})`)
        return count(kind, 'unexpected break', false)
      }
      // (An abort timer that fires after the end changes nothing: the stream is compared as any other.)
      const got = Buffer.concat(parts)
      if (kind === 'badstatus') {
        const ok = status === 502 && /"code":"TOKENTAP_ERR_UPSTREAM_(BAD_RESPONSE|FAILED)"/.test(got.toString())
        if (!ok) problems.push(`badstatus: status ${status}, body ${got.toString().slice(0, 200)}`)
        return count(kind, ok ? '502 JSON error (expected)' : 'wrong answer', ok)
      }
      if (kind === 'reset' || kind === 'stall') {
        problems.push(`${kind}: a clean end (status ${status})`)
        return count(kind, 'clean end (wrong)', false)
      }
      if (kind === 'sim') {
        const ok = status === 200 && got.toString().includes('[DONE]')
        if (!ok) problems.push(`sim: status ${status}, body ${got.toString().slice(0, 200)}`)
        return count(kind, ok ? 'ok' : 'wrong', ok)
      }
      const expected =
        kind === 'bomb'
          ? bomb
          : Buffer.from(
              normalWrites(seed, kind === 'oversize')
                .map((w) => w.data)
                .join(''),
            )
      compared++
      if (status !== 200 || !got.equals(expected)) {
        mismatched++
        problems.length < 50 && problems.push(`${kind} seed ${seed}: status ${status}, ${got.length} bytes, expected ${expected.length}`)
        return count(kind, 'bytes differ', false)
      }
      // An abort whose timer came after the end is a normal stream, compared as any other.
      count(kind, 'ok, bytes identical', kind !== 'abort')
    }
    const firstRound = [...EVERY_KIND]
    const client = async (): Promise<void> => {
      for (let kind = firstRound.shift(); kind !== undefined; kind = firstRound.shift()) await one(kind, Math.floor(r() * 1e9), true)
      while (Date.now() < endAt) {
        let kind: Kind | 'sim' = r() < 0.15 ? 'sim' : KINDS[Math.floor(r() * KINDS.length)]
        // A stall lasts the idle timeout: none starts that would outlast the traffic.
        if (kind === 'stall' && Date.now() + IDLE_TIMEOUT_MS > endAt) kind = 'normal'
        await one(kind, Math.floor(r() * 1e9))
      }
    }
    const progress = setInterval(() => log(`${requests} requests; ${JSON.stringify(outcomes)}`), 10_000)
    await Promise.all(Array.from({ length: opts.concurrency }, client))
    clearInterval(progress)
    await agent.close()
    clearInterval(scrapeTimer)
    // Let keep-alive on both sides run out (the proxy's upstream pool: 1 s, on undici's coarse
    // timers), then count: at most 5 s for the proxy's sockets to come back to where they were.
    const restStart = Date.now()
    for (;;) {
      const now = proxySockets(pid, proxyPort, upstream.port)
      if ((now.client <= socketsBefore.client && now.upstream <= socketsBefore.upstream) || Date.now() - restStart > 5000) break
      await sleep(100)
    }
    log(`proxy sockets at rest ${Date.now() - restStart} ms after the traffic`)
    // Requests whose bytes are done may still be measuring on a loaded machine: wait up to 15 s
    // for them; what is left then is a leak.
    const settleStart = Date.now()
    let inFlightAtEnd = metric(await (await fetch(`${listening.admin}/metrics`)).text(), 'llm_requests_in_flight')
    const inFlightAfterTraffic = inFlightAtEnd
    while (inFlightAtEnd > 0 && Date.now() - settleStart < 15_000) {
      await sleep(500)
      inFlightAtEnd = metric(await (await fetch(`${listening.admin}/metrics`)).text(), 'llm_requests_in_flight')
    }
    log(`in flight once the sockets were at rest: ${inFlightAfterTraffic}; ${inFlightAtEnd} after ${Date.now() - settleStart} ms more`)
    const snap = (await (await fetch(`${listening.admin}/debug/streams`)).json()) as { in_flight: number; streams: { model?: string }[] }
    const stuck: Record<string, number> = {}
    for (const st of snap.streams) stuck[st.model ?? '?'] = (stuck[st.model ?? '?'] ?? 0) + 1
    const socketsAfter = proxySockets(pid, proxyPort, upstream.port)
    const rssEndMb = rssMb(pid)
    const t0 = Date.now()
    child.kill('SIGTERM')
    // Its own limit is drain_seconds + 5 s (then it exits 1); the wait allows for a loaded machine.
    const exitCode = await Promise.race([exited, sleep((DRAIN_SECONDS + 60) * 1000).then(() => 'still running after drain_seconds + 60 s')])
    const exitMs = Date.now() - t0

    if (inFlightAtEnd !== 0) problems.push(`${inFlightAtEnd} requests still in flight`)
    if (snap.in_flight !== 0) problems.push(`/debug/streams shows ${snap.in_flight} in flight: ${JSON.stringify(stuck)}`)
    if (socketsAfter.client > socketsBefore.client) problems.push(`${socketsAfter.client - socketsBefore.client} client-side sockets leaked`)
    if (socketsAfter.upstream > socketsBefore.upstream) problems.push(`${socketsAfter.upstream - socketsBefore.upstream} upstream-side sockets leaked`)
    if (upstream.open() > 0 && socketsAfter.upstream === 0) {
      // The proxy closed its side; the upstream's close may lag by a tick. Not a proxy leak.
    }
    if (exitCode !== 0) problems.push(`tokentap on SIGTERM: ${exitCode}`)
    if (mismatched > 0) problems.push(`${mismatched} of ${compared} normal streams differed from the upstream's bytes`)
    if (scrapes < opts.seconds * 0.8) problems.push(`only ${scrapes} scrapes in ${opts.seconds} s`)
    const missed = EVERY_KIND.filter((k) => exercised[k] === 0)
    if (missed.length > 0) problems.push(`never exercised: ${missed.join(', ')}`)
    if (/\n\s+at /.test(stderr)) problems.push(`stack trace on stderr: ${stderr.slice(-1000)}`)
    return {
      outcomes,
      exercised,
      requests,
      compared,
      mismatched,
      inFlightAtEnd,
      debugStreamsAtEnd: snap.in_flight,
      socketsBefore,
      socketsAfter,
      rssStartMb,
      rssEndMb,
      maxEventLoopStallMs: maxLagMs,
      scrapes,
      exitCode,
      exitMs,
      problems,
    }
  } finally {
    process.off('exit', killer)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await upstream.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

/** The report as the soak prints it. */
export function formatReport(r: FaultSoakReport): string {
  const lines = ['requests by outcome:']
  for (const [k, v] of Object.entries(r.outcomes).sort()) lines.push(`  ${String(v).padStart(7)}  ${k}`)
  lines.push(
    `faults exercised (requests in which each really happened): ${Object.entries(r.exercised)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
    `total ${r.requests}; normal streams compared byte for byte: ${r.compared}, differing: ${r.mismatched}`,
    `in flight at the end: ${r.inFlightAtEnd} (metric), ${r.debugStreamsAtEnd} (/debug/streams)`,
    `proxy sockets at rest (client side / upstream side): before ${r.socketsBefore.client} / ${r.socketsBefore.upstream}, after ${r.socketsAfter.client} / ${r.socketsAfter.upstream}`,
    `RSS: start ${r.rssStartMb.toFixed(1)} MiB, end ${r.rssEndMb.toFixed(1)} MiB`,
    `longest event-loop stall: ${r.maxEventLoopStallMs.toFixed(1)} ms over ${r.scrapes} scrapes`,
    `SIGTERM: exit ${r.exitCode} after ${r.exitMs} ms`,
    r.problems.length === 0 ? 'FAULT SOAK OK' : `FAULT SOAK FAILED:\n  ${r.problems.join('\n  ')}`,
  )
  return lines.join('\n')
}
