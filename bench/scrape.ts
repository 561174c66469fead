import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Job } from './load-client.ts'
import { askChild, freePort, startLoadClient, startPortPrinter } from './proc.ts'
import { PROMETHEUS_ACCEPT, describeScrape, scrapePhase } from './scrape-phase.ts'

/**
 * The benchmark's scrape phase alone, for A/B comparisons of the exposition:
 * `npm run build && node dist/bench/scrape.js [--models 91,1000] [--scrapes 100,10] [--text] [--identity]`
 * (`--text`: ask for the Prometheus text format instead of Prometheus's default Accept;
 * `--identity`: without `Accept-Encoding: gzip`).
 * Same processes as `npm run bench` (simulator, proxy with the el-probe, load generator).
 */

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const arg = (name: string, dflt: string): number[] => {
  const i = process.argv.indexOf(name)
  return (i < 0 ? dflt : process.argv[i + 1]).split(',').map(Number)
}
const MODELS = arg('--models', '91,1000')
const SCRAPES = arg('--scrapes', '100,10')

const procs: ChildProcess[] = []
process.on('exit', () => {
  for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL')
})

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-scrape-'))
  const { proc: sim, port: simPort } = await startPortPrinter(join(DIST, 'src', 'sim', 'cli.js'), [])
  procs.push(sim)
  const port = await freePort()
  const adminPort = await freePort()
  const config = join(dir, 'tokentap.yaml')
  writeFileSync(config, `server: { host: 127.0.0.1, port: ${port} }\nadmin: { host: 127.0.0.1, port: ${adminPort} }\nlimits: { max_models_per_route: ${Math.max(...MODELS) + 100} }\nlog: { level: warn }\nroutes:\n  - prefix: /t\n    upstream: http://127.0.0.1:${simPort}\n    provider: openai\n`)
  const prof = process.argv.includes('--prof') ? ['--cpu-prof', '--cpu-prof-dir', join(process.cwd(), 'prof')] : []
  const tt = spawn(process.execPath, [...prof, '--import', join(DIST, 'bench', 'el-probe.js'), join(DIST, 'src', 'server.js'), '--config', config], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  procs.push(tt)
  for (;;) {
    const up = await fetch(`http://127.0.0.1:${adminPort}/readyz`).then((r) => r.ok, () => false)
    if (up) break
    await new Promise((r) => setTimeout(r, 100))
  }
  const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  procs.push(load.proc)
  const job = <T>(j: Job): Promise<T> => load.job<T>(j)
  const ask = (cmd: string, reply: string): Promise<Record<string, number>> => askChild(tt, cmd, reply)
  const deps = {
    pid: tt.pid!,
    job,
    ask,
    streamUrl: `http://127.0.0.1:${port}/t/v1/chat/completions`,
    metricsUrl: `http://127.0.0.1:${adminPort}/metrics`,
    accept: process.argv.includes('--text') ? undefined : PROMETHEUS_ACCEPT,
    gzip: !process.argv.includes('--identity'),
    body: (plan: object, model: string): string => JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'bench' }], tokentap_sim: plan }),
  }
  // Warm up (JIT, pools).
  await job({ kind: 'streams', url: deps.streamUrl, body: deps.body({ ttft_ms: 0, chunks: [[0, 1]] }, 'warm'), count: 300, concurrency: 8, phaseMs: 0, idPrefix: 'warm', detail: false })
  for (let i = 0; i < MODELS.length; i++) {
    const f = await scrapePhase(deps, MODELS[i], SCRAPES[i] ?? SCRAPES[SCRAPES.length - 1])
    process.stdout.write(`${describeScrape(f)}\n${JSON.stringify(f)}\n`)
  }
  rmSync(dir, { recursive: true, force: true })
  if (prof.length > 0) {
    // A profile is written on a normal exit only.
    tt.kill('SIGTERM')
    await new Promise((r) => tt.once('exit', r))
  }
  process.exit(0)
}

await main()
