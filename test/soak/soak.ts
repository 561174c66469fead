/**
 * Soak: holds many concurrent streams through a real tokentap process to its simulator for N
 * minutes, samples the proxy's RSS and open sockets every few seconds, prints a table, and exits
 * non-zero when RSS keeps growing after warm-up, sockets leak, or a stream fails.
 *
 *   npm run soak -- --minutes 2 --streams 1000
 *   SOAK_MINUTES=10 npm run soak
 *
 * Not part of `npm test`: it takes minutes and wants the machine to itself.
 *
 *   npm run soak -- --faults [--quick]   the fault soak instead (test/soak/fault-soak.ts): 10 min (2)
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { Agent, request } from 'undici'
import { distPath } from '../helpers/paths.ts'
import { formatReport, runFaultSoak } from './fault-soak.ts'

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: process.env.SOAK_MINUTES ?? '2' },
    streams: { type: 'string', default: process.env.SOAK_STREAMS ?? '1000' },
    'sample-seconds': { type: 'string', default: '5' },
    'warmup-seconds': { type: 'string', default: '40' },
    'max-growth-mb': { type: 'string', default: '64' },
    faults: { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    concurrency: { type: 'string', default: '48' },
  },
})
const MINUTES = Number(values.minutes)
const STREAMS = Number(values.streams)
const SAMPLE_MS = Number(values['sample-seconds']) * 1000
const WARMUP_MS = Number(values['warmup-seconds']) * 1000
const MAX_GROWTH_MB = Number(values['max-growth-mb'])
// Each stream: 50 tokens, one every 200 ms after a 300 ms TTFT: about 10 s, then the client asks
// again. 1,000 such streams are 5,000 events a second through the proxy (and its simulator).
const TOKENS = 50
const ITL_MS = 200

const SERVER = distPath('src/server.js')

interface Sample {
  readonly at: number
  readonly rssMb: number
  readonly heapMb: number
  readonly sockets: number
  readonly inFlight: number
  readonly open: number
  readonly done: number
  readonly failed: number
}

/** Resident set of a process, MiB (Linux /proc). */
function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m === null ? NaN : Number(m[1]) / 1024
}

/** Open sockets of a process: its file descriptors that are sockets (listeners included). */
function socketCount(pid: number): number {
  let n = 0
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) n++
    } catch {
      // closed while listing
    }
  }
  return n
}

/** Requests in flight and the V8 heap in use (MiB), from the proxy's own scrape. */
async function scrape(admin: string): Promise<{ inFlight: number; heapMb: number }> {
  const text = await (await fetch(`${admin}/metrics`)).text()
  let inFlight = 0
  let heap = NaN
  for (const line of text.split('\n')) {
    if (line.startsWith('llm_requests_in_flight{')) inFlight += Number(line.slice(line.lastIndexOf(' ') + 1))
    else if (line.startsWith('nodejs_heap_size_used_bytes ')) heap = Number(line.slice(line.lastIndexOf(' ') + 1)) / 1024 / 1024
  }
  return { inFlight, heapMb: heap }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-soak-'))
  const configFile = join(dir, 'soak.yaml')
  writeFileSync(
    configFile,
    [
      'server: { host: 127.0.0.1, port: 0, drain_seconds: 5 }',
      'admin: { host: 127.0.0.1, port: 0 }',
      'upstream: { keep_alive_timeout_ms: 2000 }',
      // info: the 'tokentap listening' line carries the bound ports (and each request's line is real work too).
      'log: { level: info }',
      'routes:',
      '  - prefix: /sim',
      `    simulator: { ttft_ms: 300, itl_ms: ${ITL_MS}, jitter_ms: 10, tokens: ${TOKENS}, stall_probability: 0 }`,
      '',
    ].join('\n'),
  )
  // A capped old space makes V8 collect instead of growing into its (multi-GiB) default headroom,
  // so RSS that still grows is memory really held. SOAK_SERVER_NODE_ARGS='' runs uncapped.
  const nodeArgs = (process.env.SOAK_SERVER_NODE_ARGS ?? '--max-old-space-size=160').split(' ').filter(Boolean)
  const child = spawn(process.execPath, [...nodeArgs, SERVER, '--config', configFile], { stdio: ['ignore', 'pipe', 'inherit'] })
  const pid = child.pid
  if (pid === undefined || child.stdout === null) throw new Error('tokentap did not start')
  const stdout = child.stdout
  const listening = await new Promise<{ proxy: string; admin: string }>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`tokentap exited with ${code}`)))
    createInterface({ input: stdout }).on('line', (line) => {
      if (line.includes('tokentap listening')) {
        const l = JSON.parse(line) as { proxy: string; admin: string }
        resolve({ proxy: `http://${l.proxy}`, admin: `http://${l.admin}` })
      }
    })
  })
  // One scrape first, so the admin keep-alive connection this script uses is in the baseline.
  await scrape(listening.admin)
  const idleSockets = socketCount(pid)
  const idleRss = rssMb(pid)
  console.log(`tokentap pid ${pid} (node ${nodeArgs.join(' ')}): ${idleSockets} sockets, ${idleRss.toFixed(1)} MiB RSS at rest; ${STREAMS} streams for ${MINUTES} min`)

  const agent = new Agent({ connections: null, keepAliveTimeout: 1000, bodyTimeout: 60_000, headersTimeout: 60_000 })
  const body = JSON.stringify({ model: 'soak-model', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'soak' }] })
  const endAt = Date.now() + MINUTES * 60_000
  let open = 0
  let done = 0
  let failed = 0
  let lastError = ''
  const client = async (): Promise<void> => {
    while (Date.now() < endAt) {
      open++
      try {
        const res = await request(`${listening.proxy}/sim/v1/chat/completions`, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body })
        let tail = ''
        for await (const chunk of res.body) tail = (tail + (chunk as Buffer).toString('latin1')).slice(-64)
        if (res.statusCode !== 200 || !tail.includes('[DONE]')) throw new Error(`status ${res.statusCode}, tail ${JSON.stringify(tail)}`)
        done++
      } catch (err) {
        failed++
        lastError = (err as Error).message
      } finally {
        open--
      }
    }
  }
  const start = Date.now()
  // Ramp up over 5 s so the first tokens are not all due at the same instant.
  const clients = Array.from({ length: STREAMS }, (_, i) => new Promise<void>((r) => setTimeout(r, (i * 5000) / STREAMS)).then(client))

  const samples: Sample[] = []
  console.log(' time_s   rss_MiB  heap_MiB  sockets  in_flight  open  done  failed')
  const sample = async (): Promise<Sample> => {
    const m = await scrape(listening.admin)
    const s = { at: (Date.now() - start) / 1000, rssMb: rssMb(pid), heapMb: m.heapMb, sockets: socketCount(pid), inFlight: m.inFlight, open, done, failed }
    console.log(
      `${s.at.toFixed(0).padStart(7)} ${s.rssMb.toFixed(1).padStart(9)} ${s.heapMb.toFixed(1).padStart(9)} ${String(s.sockets).padStart(8)} ${String(s.inFlight).padStart(10)} ${String(s.open).padStart(5)} ${String(s.done).padStart(5)} ${String(s.failed).padStart(7)}`,
    )
    return s
  }
  const timer = setInterval(() => void sample().then((s) => samples.push(s)), SAMPLE_MS)
  await Promise.all(clients)
  clearInterval(timer)
  await agent.close()
  // Let keep-alive timers on both sides run out, then count what is left.
  await new Promise((r) => setTimeout(r, 5000))
  const after = await sample()

  child.kill('SIGTERM')
  const code = await new Promise<number | null>((r) => child.once('exit', r))
  rmSync(dir, { recursive: true, force: true })

  const problems: string[] = []
  const warm = samples.filter((s) => s.at * 1000 >= WARMUP_MS)
  if (warm.length >= 3) {
    const third = Math.max(1, Math.floor(warm.length / 3))
    const mean = (xs: Sample[]): number => xs.reduce((n, s) => n + s.rssMb, 0) / xs.length
    const early = mean(warm.slice(0, third))
    const late = mean(warm.slice(-third))
    console.log(`RSS after warm-up: first third ${early.toFixed(1)} MiB, last third ${late.toFixed(1)} MiB (growth ${(late - early).toFixed(1)} MiB, limit ${MAX_GROWTH_MB})`)
    if (late - early > MAX_GROWTH_MB) problems.push(`RSS grew by ${(late - early).toFixed(1)} MiB after warm-up`)
  } else {
    problems.push('too few samples after warm-up to judge RSS (run longer)')
  }
  const peak = samples.reduce((m, s) => Math.max(m, s.open), 0)
  console.log(`streams: ${done} completed, ${failed} failed, peak concurrency ${peak}; sockets at rest ${idleSockets} before, ${after.sockets} after; in flight after ${after.inFlight}; exit ${code}`)
  if (after.sockets > idleSockets) problems.push(`${after.sockets - idleSockets} sockets leaked`)
  if (after.inFlight !== 0) problems.push(`${after.inFlight} requests still counted in flight`)
  if (failed > 0) problems.push(`${failed} streams failed (last: ${lastError})`)
  if (peak < STREAMS * 0.95) problems.push(`only ${peak} concurrent streams reached`)
  if (code !== 0) problems.push(`tokentap exited with ${code} on SIGTERM`)
  if (problems.length > 0) {
    console.log(`SOAK FAILED: ${problems.join('; ')}`)
    process.exit(1)
  }
  console.log('SOAK OK')
}

async function faultSoak(): Promise<void> {
  const report = await runFaultSoak({
    seconds: Number(process.env.FAULT_SOAK_SECONDS ?? (values.quick ? 2 : 10) * 60),
    concurrency: Number(values.concurrency),
    server: [process.execPath, SERVER],
    log: (line) => console.log(line),
  })
  console.log(formatReport(report))
  process.exit(report.problems.length === 0 ? 0 : 1)
}

void (values.faults ? faultSoak() : main()).catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
