import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { NGINX_HINT, findNginx, startNginx } from './nginx.ts'
import { LOAD_CHUNKS, LOAD_GAP_MS, evenPlan, loadJob, turns, warmUpJob } from './plans.ts'
import { pidOf, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from './proc.ts'
import { SAT_CHUNKS, SAT_CONCURRENCY, SAT_STREAMS, saturationPhase } from './saturation-phase.ts'

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

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-saturation-'))
  const pids: Record<string, number[]> = {}
  /** Starts one of our listeners; a relay's process is the one whose CPU its path counts. */
  const started = async (script: string[], args: string[], path?: string): Promise<number> => {
    const s = await startPortPrinter(join(DIST, ...script), args)
    stopOnExit(s.proc)
    if (path !== undefined) pids[path] = [pidOf(s.proc)]
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
  stopOnExit(tt.proc)
  const upstream = ['--upstream', `http://127.0.0.1:${simPort}`]
  const urls: Record<string, string> = {
    direct: `http://127.0.0.1:${simPort}/v1/chat/completions`,
    'tcp-relay': `http://127.0.0.1:${await started(['bench', 'tcp-relay.js'], upstream, 'tcp-relay')}/v1/chat/completions`,
    'node-relay': `http://127.0.0.1:${await started(['bench', 'node-relay.js'], upstream, 'node-relay')}/v1/chat/completions`,
  }
  pids.tokentap = [pidOf(tt.proc)]
  const nginxBin = findNginx()
  if (nginxBin === undefined) process.stdout.write(`${NGINX_HINT}\n`)
  else {
    const ng = await startNginx(nginxBin, join(dir, 'nginx'), simPort)
    stopOnExit(ng.proc, 'SIGTERM')
    urls.nginx = `http://127.0.0.1:${ng.port}/v1/chat/completions`
    pids.nginx = ng.pids
  }
  urls.tokentap = `http://127.0.0.1:${tt.port}/t/v1/chat/completions`
  const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  stopOnExit(load.proc)
  const paths = Object.keys(urls)

  for (const p of paths) await load.job(warmUpJob(urls[p], `warm-${p}`))
  for (const n of AFTER_LOAD) {
    process.stderr.write(`load: ${n} streams × ${LOAD_CHUNKS} chunks ${LOAD_GAP_MS} ms apart, 3 rounds per path\n`)
    for (const { round, path } of turns(paths, 3)) {
      await load.job(loadJob(urls[path], n, `load${n}-${path}-${round}`))
      await new Promise((res) => setTimeout(res, 200))
    }
  }
  await new Promise((res) => setTimeout(res, 500))
  process.stderr.write(`saturation: ${SAT_STREAMS} streams × ${SAT_CHUNKS} chunks, no gaps, ${SAT_CONCURRENCY} at a time, ${ROUNDS} rounds per path\n`)
  gc = TRACE_GC ? [] : undefined
  const sat = await saturationPhase({ job: load.job, urls, pids, plan: evenPlan(SAT_CHUNKS, 0), streams: SAT_STREAMS, concurrency: SAT_CONCURRENCY, rounds: ROUNDS })
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
