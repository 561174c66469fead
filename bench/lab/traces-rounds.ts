import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Job } from '../load-client.ts'
import { SHORT_CHUNKS, SHORT_CONCURRENCY, evenPlan, requestBody, warmUpJob } from '../plans.ts'
import { cpuMicros, pidOf, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from '../proc.ts'
import type { TokentapProcess } from '../proc.ts'
import { round } from '../stats.ts'
import { spread } from '../verdict.ts'
import { startTraceSink } from './trace-sink.ts'

/**
 * The bench's traces round with more than one "on" process in each round
 * (`npm run bench:lab -- traces-rounds [--rounds 12] [--requests 3000] [--variants on,on:ratio=0,on:OTEL_BSP_SCHEDULE_DELAY=500]`):
 * per round a fresh "off" process and one per variant, all warmed (after each "on" one's first
 * export), loaded at once with the short requests and read once each "on" one has exported after
 * its requests, as bench/otel-phase.ts does for one pair. Loading them at once gives them the same
 * contention on a shared machine, so variants are compared within a round; the start order
 * rotates. A variant is `NAME[:KEY=VALUE,...]`: `ratio=R` sets `otel.traces.sample.ratio`, any
 * other key is an environment variable of that process but `dist=PATH`, another build's dist/ to
 * run (two builds compared in the same rounds); `noexport` (a key without a value) does
 * not wait for exports (a variant whose spans reach no collector). Prints each round and, per
 * variant, the median and quartiles of its CPU per request over the "off" process's of the same
 * round; `--out FILE` writes them as JSON.
 */

interface Variant {
  readonly name: string
  readonly ratio: number | undefined
  readonly env: Record<string, string>
  readonly exports: boolean
  /** Another build's dist/ to run (`dist=PATH`), to compare two builds in the same rounds. */
  readonly serverDist: string | undefined
}

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i < 0 ? undefined : process.argv[i + 1]
}
const ROUNDS = Number(arg('--rounds') ?? 12)
const REQUESTS = Number(arg('--requests') ?? 3000)
const WARM = Number(arg('--warm') ?? 5000)
const variants: Variant[] = (arg('--variants') ?? 'on')
  .split(/\s+|;/)
  .filter(Boolean)
  .map((spec) => {
    const rest = spec.split(':')[1] ?? ''
    const env: Record<string, string> = {}
    let ratio: number | undefined
    let exports = true
    let serverDist: string | undefined
    for (const kv of rest.split(',').filter(Boolean)) {
      const [k, v] = kv.split('=')
      if (k === 'ratio') ratio = Number(v)
      else if (k === 'noexport') exports = false
      else if (k === 'dist') serverDist = v
      else env[k] = v
    }
    return { name: spec, ratio, env, exports, serverDist }
  })

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')

/** CPU µs of each thread of a process, by thread id (/proc/PID/task/TID/schedstat). */
function threadMicros(pid: number): Map<number, number> {
  const out = new Map<number, number>()
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        out.set(Number(tid), Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1000)
      } catch {
        // the thread ended
      }
    }
  } catch {
    // no such process
  }
  return out
}

/** A window's CPU µs split: the main thread, the newest thread (the span export's worker, when there is one), the rest. */
function split(pid: number, before: Map<number, number>, after: Map<number, number>): { main: number; last: number; rest: number } {
  const newest = Math.max(...after.keys())
  let rest = 0
  for (const [tid, us] of after) if (tid !== pid && tid !== newest) rest += us - (before.get(tid) ?? 0)
  const d = (tid: number): number => (after.get(tid) ?? 0) - (before.get(tid) ?? 0)
  return { main: d(pid), last: d(newest), rest }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

async function main(): Promise<void> {
  const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  const sim = await startPortPrinter(join(DIST, 'src', 'sim', 'cli.js'), [])
  stopOnExit(sim.proc)
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-traces-rounds-'))
  const sinks = await Promise.all(variants.map(() => startTraceSink()))
  const names = ['off', ...variants.map((v) => v.name)]
  const perRound: Record<string, number>[] = []
  const loads: number[] = [loadavg()[0]]
  const body = requestBody(evenPlan(SHORT_CHUNKS, 0))
  const url = (p: TokentapProcess): string => `http://127.0.0.1:${p.port}/t/v1/chat/completions`
  const streams = (p: TokentapProcess, count: number, id: string): Job => ({ kind: 'streams', url: url(p), body, count, concurrency: SHORT_CONCURRENCY, phaseMs: 0, idPrefix: id, detail: false })
  const log = (s: string): void => void process.stderr.write(`${s}\n`)
  try {
    for (let r = 0; r < ROUNDS; r++) {
      // Each process's slot in the start order rotates from round to round.
      const order = names.map((_, i) => (i + r) % names.length)
      const all = <T>(f: (i: number) => Promise<T>): Promise<T[]> =>
        Promise.all(order.map((i) => f(i).then((x) => [i, x] as const))).then((xs) => {
          const out: T[] = []
          for (const [i, x] of xs) out[i] = x
          return out
        })
      const procs = await all(async (i) => {
        const v = i === 0 ? undefined : variants[i - 1]
        const p = await startTokentap(DIST, mkdtempSync(join(dir, `p${i}-`)), sim.port, {
          maxModels: 100,
          traces: v === undefined ? undefined : { endpoint: sinks[i - 1].url, ratio: v.ratio },
          env: v === undefined ? undefined : { ...process.env, ...v.env },
          serverDist: v?.serverDist,
        })
        stopOnExit(p.proc)
        return p
      })
      try {
        const before = sinks.map((s) => s.exports())
        await all((i) => load.job(warmUpJob(url(procs[i]), `w-${r}-${i}`)))
        // Each "on" process's first export is a start-up cost (docs/performance.md, "Spans"): warm after it.
        for (let k = 0; k < 300 && variants.some((v, j) => v.exports && sinks[j].exports() === before[j]); k++) await sleep(50)
        await all((i) => load.job(streams(procs[i], WARM, `w3-${r}-${i}`)))
        const c0 = procs.map((p) => cpuMicros([pidOf(p.proc)]))
        const t0 = procs.map((p) => threadMicros(pidOf(p.proc)))
        await all((i) => load.job(streams(procs[i], REQUESTS, `r-${r}-${i}`)))
        await sleep(100)
        const atEnd = sinks.map((s) => s.exports())
        for (let k = 0; k < 300 && variants.some((v, j) => v.exports && sinks[j].exports() === atEnd[j]); k++) await sleep(50)
        await sleep(100)
        const us = procs.map((p, i) => (cpuMicros([pidOf(p.proc)]) - c0[i]) / REQUESTS)
        const threads = procs.map((p, i) => split(pidOf(p.proc), t0[i], threadMicros(pidOf(p.proc))))
        const row: Record<string, number> = {}
        for (const [i, n] of names.entries()) {
          row[n] = us[i]
          row[`${n} main`] = threads[i].main / REQUESTS
          row[`${n} newest thread`] = threads[i].last / REQUESTS
          row[`${n} other threads`] = threads[i].rest / REQUESTS
        }
        perRound.push(row)
        loads.push(loadavg()[0])
        log(
          `  threads µs/request (main, newest, others): ${names.map((n, i) => `${n.split(':')[0]} ${round(threads[i].main / REQUESTS, 1)}/${round(threads[i].last / REQUESTS, 1)}/${round(threads[i].rest / REQUESTS, 1)}`).join(', ')}`,
        )
        log(`round ${r} (load ${round(loadavg()[0], 1)}): ${names.map((n, i) => `${n} ${round(us[i], 1)}${i === 0 ? '' : ` (${round(us[i] / us[0], 3)})`}`).join(', ')}`)
      } finally {
        await Promise.all(
          procs.map(async (p) => {
            if (p.proc.exitCode !== null || p.proc.signalCode !== null) return
            const exited = new Promise((res) => p.proc.once('exit', res))
            p.proc.kill('SIGKILL')
            await exited
          }),
        )
      }
    }
  } finally {
    await Promise.all(sinks.map((s) => s.close()))
    rmSync(dir, { recursive: true, force: true })
    sim.proc.kill('SIGKILL')
    load.proc.kill('SIGKILL')
  }
  const summary = variants.map((v) => {
    const s = spread(perRound.map((row) => row[v.name] / row.off))
    return { variant: v.name, median: round(s.median, 3), q1: round(s.q1, 3), q3: round(s.q3, 3), n: s.n }
  })
  for (const v of variants)
    for (const part of ['main', 'newest thread', 'other threads']) {
      const x = spread(perRound.map((row) => row[`${v.name} ${part}`] - row[`off ${part}`]))
      log(`  ${v.name} ${part}: ${round(x.median, 1)} µs/request more than off (quartiles ${round(x.q1, 1)}–${round(x.q3, 1)})`)
    }
  for (const s of summary) log(`${s.variant}: ${s.median}× (quartiles ${s.q1}–${s.q3}, ${s.n} rounds)`)
  const off = spread(perRound.map((row) => row.off))
  log(`off: ${round(off.median, 1)} µs/request (quartiles ${round(off.q1, 1)}–${round(off.q3, 1)}); load average ${loads.map((x) => round(x, 1)).join(' → ')}`)
  const out = arg('--out')
  if (out !== undefined) writeFileSync(out, `${JSON.stringify({ requests: REQUESTS, warm: WARM, loads, rounds: perRound, summary }, null, 1)}\n`)
}

await main()
