import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { NGINX_HINT, findNginx, startNginx } from './nginx.ts'
import { children, freePort, startLoadClient, startPortPrinter, startTokentap } from './proc.ts'
import { saturationPhase } from './saturation-phase.ts'

/**
 * The benchmark's saturation phase alone, for A/B runs of the per-chunk cost:
 * `npm run build && node dist/bench/saturation.js [--rounds 3] [--after-load 50,200] [--trace-gc]`.
 * Same processes and rounds as `npm run bench`. `--after-load` first runs its load phases
 * (N streams of 100 chunks 10 ms apart, 3 rounds per path), as the full benchmark does before
 * saturation: what they leave in the proxy's heap changes what saturation costs it.
 * `--trace-gc` counts tokentap's collections during the saturation rounds.
 */

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i < 0 ? undefined : process.argv[i + 1]
}
const ROUNDS = Number(argOf('--rounds') ?? 3)
const AFTER_LOAD = (argOf('--after-load') ?? '').split(',').filter(Boolean).map(Number)
const TRACE_GC = process.argv.includes('--trace-gc')

const procs: ChildProcess[] = []
let nginxProc: ChildProcess | undefined
process.on('exit', () => {
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill(p === nginxProc ? 'SIGTERM' : 'SIGKILL')
})

const body = (plan: object): string => JSON.stringify({ model: 'bench-model', stream: true, messages: [{ role: 'user', content: 'bench' }], tokentap_sim: plan })
const evenPlan = (chunks: number, gapMs: number): object => ({ ttft_ms: 0, chunks: Array.from({ length: chunks - 1 }, () => [gapMs, 1]) })

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-saturation-'))
  const pids: Record<string, number[]> = {}
  /** Starts one of our listeners; a relay's process is the one whose CPU its path counts. */
  const started = async (script: string[], args: string[], path?: string): Promise<number> => {
    const s = await startPortPrinter(join(DIST, ...script), args)
    procs.push(s.proc)
    if (path !== undefined) pids[path] = [s.proc.pid!]
    return s.port
  }
  const simPort = await started(['src', 'sim', 'cli.js'], [])
  let gc: string[] | undefined
  const tt = await startTokentap(DIST, dir, simPort, {
    maxModels: 100,
    flags: TRACE_GC ? ['--trace-gc'] : [],
    onLine: (line) => {
      if (gc !== undefined && /: (Scavenge|Mark-Compact|Mark-Sweep|Minor Mark)/.test(line)) gc.push(line)
    },
  })
  procs.push(tt.proc)
  const upstream = ['--upstream', `http://127.0.0.1:${simPort}`]
  const urls: Record<string, string> = {
    direct: `http://127.0.0.1:${simPort}/v1/chat/completions`,
    'tcp-relay': `http://127.0.0.1:${await started(['bench', 'tcp-relay.js'], upstream, 'tcp-relay')}/v1/chat/completions`,
    'node-relay': `http://127.0.0.1:${await started(['bench', 'node-relay.js'], upstream, 'node-relay')}/v1/chat/completions`,
  }
  pids.tokentap = [tt.proc.pid!]
  const nginxBin = findNginx()
  if (nginxBin === undefined) process.stdout.write(`${NGINX_HINT}\n`)
  else {
    const port = await freePort()
    nginxProc = startNginx(nginxBin, join(dir, 'nginx'), port, simPort)
    procs.push(nginxProc)
    urls.nginx = `http://127.0.0.1:${port}/v1/chat/completions`
    for (let i = 0; i < 100 && (pids.nginx?.length ?? 0) < 2; i++) {
      await new Promise((r) => setTimeout(r, 50))
      pids.nginx = [nginxProc.pid!, ...children(nginxProc.pid!)]
    }
  }
  urls.tokentap = `http://127.0.0.1:${tt.port}/t/v1/chat/completions`
  const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  procs.push(load.proc)
  const paths = Object.keys(urls)

  for (const p of paths) await load.job({ kind: 'streams', url: urls[p], body: body(evenPlan(20, 0)), count: 300, concurrency: 8, phaseMs: 0, idPrefix: `warm-${p}`, detail: false })
  for (const n of AFTER_LOAD) {
    process.stderr.write(`load: ${n} streams × 100 chunks 10 ms apart, 3 rounds per path\n`)
    for (let r = 0; r < 3; r++) {
      for (let k = 0; k < paths.length; k++) {
        const p = paths[(r + k) % paths.length]
        await load.job({ kind: 'streams', url: urls[p], body: body(evenPlan(100, 10)), count: n, concurrency: n, phaseMs: 10, idPrefix: `load${n}-${p}-${r}`, detail: true })
        await new Promise((res) => setTimeout(res, 200))
      }
    }
  }
  await new Promise((res) => setTimeout(res, 500))
  process.stderr.write(`saturation: 32 streams × 2000 chunks, no gaps, 8 at a time, ${ROUNDS} rounds per path\n`)
  gc = TRACE_GC ? [] : undefined
  const sat = await saturationPhase({ job: load.job, urls, pids, body: body(evenPlan(2000, 0)), streams: 32, concurrency: 8, rounds: ROUNDS })
  const nginxRate = sat.nginx === undefined ? NaN : sat.nginx.chunks / sat.nginx.seconds
  for (const p of paths) {
    const f = sat[p]
    const rate = f.chunks / f.seconds
    const cpu = p === 'direct' ? '–' : `${(f.cpuUs / f.chunks).toFixed(2)} µs/chunk`
    process.stdout.write(`${p.padEnd(11)} ${cpu.padStart(15)}  ${rate.toFixed(0).padStart(7)} chunks/s${Number.isNaN(nginxRate) ? '' : `  ${(rate / nginxRate).toFixed(2)}× nginx`}\n`)
  }
  if (gc !== undefined) {
    const pause = (l: string): number => Number(/MB, ([\d.]+) \//.exec(l)?.[1] ?? 0)
    const minor = gc.filter((l) => l.includes('Scavenge') || l.includes('Minor'))
    const major = gc.filter((l) => !minor.includes(l))
    const ms = (ls: string[]): string => ls.reduce((a, l) => a + pause(l), 0).toFixed(1)
    process.stdout.write(`tokentap GC during the saturation rounds (all paths' turns): ${minor.length} scavenges (${ms(minor)} ms), ${major.length} mark-compacts (${ms(major)} ms of pauses)\n`)
  }
  rmSync(dir, { recursive: true, force: true })
  process.exit(0)
}

await main()
