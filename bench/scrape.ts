import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Job } from './load-client.ts'
import { requestBody, warmUpJob } from './plans.ts'
import { pidOf, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from './proc.ts'
import { PROMETHEUS_ACCEPT, describeScrape, scrapeAtSeries, scrapePhase, servesProtobuf } from './scrape-phase.ts'

/**
 * The benchmark's scrape phase alone, for A/B comparisons of the exposition:
 * `npm run build && node dist/bench/scrape.js [--models 59,1000 | --series 1000] [--scrapes 100,10] [--text] [--identity]`
 * (`--series`: scales in llm_ histogram series rather than models, as `npm run bench` reports them;
 * `--text`: ask for the Prometheus text format instead of Prometheus's default Accept;
 * `--identity`: without `Accept-Encoding: gzip`). When the proxy serves the protobuf exposition,
 * each scale is scraped in both formats.
 * Same processes as `npm run bench` (simulator, proxy with the el-probe, load generator).
 */

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const arg = (name: string, dflt: string): number[] => {
  const i = process.argv.indexOf(name)
  return (i < 0 ? dflt : process.argv[i + 1]).split(',').map(Number)
}
const MODELS = arg('--models', '59,1000')
const SERIES = process.argv.includes('--series') ? arg('--series', '1000') : undefined
const SCRAPES = arg('--scrapes', '100,10')

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-scrape-'))
  const { proc: sim, port: simPort } = await startPortPrinter(join(DIST, 'src', 'sim', 'cli.js'), [])
  stopOnExit(sim)
  const prof = process.argv.includes('--prof') ? ['--cpu-prof', '--cpu-prof-dir', join(process.cwd(), 'prof')] : []
  const tt = await startTokentap(DIST, dir, simPort, { maxModels: Math.max(...MODELS) + 100, flags: prof })
  stopOnExit(tt.proc)
  const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  stopOnExit(load.proc)
  const job = <T>(j: Job): Promise<T> => load.job<T>(j)
  const deps = {
    pid: pidOf(tt.proc),
    job,
    ask: tt.ask,
    streamUrl: `http://127.0.0.1:${tt.port}/t/v1/chat/completions`,
    metricsUrl: `http://127.0.0.1:${tt.adminPort}/metrics`,
    accept: process.argv.includes('--text') ? undefined : PROMETHEUS_ACCEPT,
    gzip: !process.argv.includes('--identity'),
    body: requestBody,
  }
  // Warm up (JIT, pools).
  await job(warmUpJob(deps.streamUrl, 'warm'))
  const protobuf = await servesProtobuf(deps)
  const scales = SERIES ?? MODELS
  for (let i = 0; i < scales.length; i++) {
    const scrapes = SCRAPES[i] ?? SCRAPES[SCRAPES.length - 1]
    const f = SERIES === undefined ? await scrapePhase(deps, scales[i], scrapes, protobuf) : await scrapeAtSeries(deps, scales[i], scrapes, protobuf)
    process.stdout.write(`${describeScrape(f)}\n${JSON.stringify(f)}\n`)
  }
  rmSync(dir, { recursive: true, force: true })
  if (prof.length > 0) {
    // A profile is written on a normal exit only.
    tt.proc.kill('SIGTERM')
    await new Promise((r) => tt.proc.once('exit', r))
  }
  process.exit(0)
}

await main()
