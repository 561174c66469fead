import { spawn } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
import pino from 'pino'
import { validateConfig } from '../../src/config/load-config.ts'
import { OtelTraces } from '../../src/metrics/otel/traces.ts'
import type { Observations } from '../../src/record/observations.ts'
import { RecordPolicy } from '../../src/record/observations.ts'
import { TraceIdSource } from '../../src/record/trace-context.ts'
import { labRequest } from './lab-request.ts'

/**
 * What the span export costs a fresh process over time, at a fixed rate of kept spans
 * (`npm run bench:lab -- trace-rate [--rate 40] [--seconds 60] [--window 5]`): `OtelTraces` with
 * its export thread, spans of a 3-chunk stream recorded at `rate` a second (the bench's traces
 * round keeps ≈ 40 a second), exported to a sink in a child process. Per window: CPU ms a second
 * and µs a span of this process's main thread, the export thread and the other threads (V8's
 * compiler and GC helpers, libuv's pool). The start cost is the excess of the first windows over
 * the last ones.
 */

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(name)
  return i < 0 ? dflt : Number(process.argv[i + 1])
}
const RATE = arg('--rate', 40)
const SECONDS = arg('--seconds', 60)
const WINDOW = arg('--window', 5)

function threads(): Map<number, number> {
  const out = new Map<number, number>()
  for (const tid of readdirSync(`/proc/${process.pid}/task`)) {
    try {
      out.set(Number(tid), Number(readFileSync(`/proc/${process.pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1000)
    } catch {
      // the thread ended
    }
  }
  return out
}

const SINK = `const s = require('node:http').createServer((q, r) => { q.resume(); q.on('end', () => r.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': '0' }).end()) });
s.listen(0, '127.0.0.1', () => process.stdout.write(s.address().port + '\\n'))`

async function main(): Promise<void> {
  const sink = spawn(process.execPath, ['-e', SINK], { stdio: ['ignore', 'pipe', 'inherit'] })
  const port = await new Promise<number>((r) => sink.stdout.once('data', (d: Buffer) => r(Number(String(d).trim()))))
  const url = `http://127.0.0.1:${port}/v1/traces`
  const config = validateConfig({ routes: [{ prefix: '/t', upstream: 'http://127.0.0.1:1' }], otel: { traces: { endpoint: url, sample: { ratio: 1 } } } })
  const traces = config.otel.traces as NonNullable<typeof config.otel.traces>
  let now = 1000
  const before = threads()
  const tracer = new OtelTraces({ config: config.otel, traces, logger: pino({ level: 'silent' }), stallSeconds: 1, now: () => now, serverOf: () => ({ address: '127.0.0.1', port: 1 }) })
  const policy = new RecordPolicy({ maxModelsPerRoute: 100, lengthBandLabel: false, genAi: true, traces: { ratio: 1, keep: traces.sample.keep, slowSeconds: 10 } })
  const ids = new TraceIdSource()
  const one = (): Observations => {
    const { who, m } = labRequest(now, `r${now}`, 3, ids)
    now += 200
    return policy.observe(who, m)
  }
  const total = RATE * SECONDS
  const observed = Array.from({ length: total }, one)
  await new Promise((r) => setTimeout(r, 300))
  const started = threads()
  const exportTid = Math.max(...[...started.keys()].filter((t) => !before.has(t)))
  const t0 = performance.now()
  let sent = 0
  let last = started
  let lastSent = 0
  const rows: { from: number; main: number; export: number; other: number }[] = []
  const windowRow = (): void => {
    const at = threads()
    const d = (tid: number): number => (at.get(tid) ?? 0) - (last.get(tid) ?? 0)
    let other = 0
    for (const tid of at.keys()) if (tid !== process.pid && tid !== exportTid) other += d(tid)
    const spans = sent - lastSent
    const row = { from: rows.length * WINDOW, main: d(process.pid), export: d(exportTid), other }
    rows.push(row)
    const ms = (us: number): string => (us / 1000 / WINDOW).toFixed(2)
    const per = (us: number): string => (us / Math.max(1, spans)).toFixed(1)
    process.stderr.write(
      `[trace-rate] ${String(row.from).padStart(3)} s: ${spans} spans; ms/s main ${ms(row.main)}, export ${ms(row.export)}, other ${ms(row.other)}; µs/span ${per(row.main)}, ${per(row.export)}, ${per(row.other)}\n`,
    )
    last = at
    lastSent = sent
  }
  await new Promise<void>((done) => {
    const tick = setInterval(() => {
      const due = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * RATE))
      while (sent < due) tracer.record(observed[sent++])
      if (performance.now() - t0 >= (rows.length + 1) * WINDOW * 1000) windowRow()
      if (rows.length * WINDOW >= SECONDS) {
        clearInterval(tick)
        done()
      }
    }, 25)
  })
  const sum = (part: 'main' | 'export' | 'other', from: number): number => rows.filter((r) => r.from >= from).reduce((s, r) => s + r[part], 0)
  const tail = Math.max(0, SECONDS - 20)
  const tailSpans = RATE * (SECONDS - tail)
  process.stdout.write(
    `${JSON.stringify({
      rate: RATE,
      seconds: SECONDS,
      total_ms: { main: sum('main', 0) / 1000, export: sum('export', 0) / 1000, other: sum('other', 0) / 1000 },
      last20s_us_per_span: { main: sum('main', tail) / tailSpans, export: sum('export', tail) / tailSpans, other: sum('other', tail) / tailSpans },
    })}\n`,
  )
  await tracer.shutdown()
  sink.kill('SIGKILL')
}

void main()
