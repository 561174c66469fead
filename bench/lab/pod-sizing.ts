import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Job } from '../load-client.ts'
import { evenPlan, request, requestBody, warmUpJob } from '../plans.ts'
import { cpuMicros, pidOf, rssBytes, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from '../proc.ts'

/**
 * The figures deploy/kubernetes is sized from (docs/operations.md, "Sizing a pod"), written to
 * bench/results/pod-sizing.json: `npm run bench:lab -- pod-sizing [--streams 1000] [--label-sets 300]`.
 * One tokentap process (the ConfigMap's `workers: 1`) proxying the simulator in its own process:
 * RSS idle after a scrape; RSS and CPU with `--streams` slow streams open (a chunk every 100 ms);
 * RSS after `--label-sets` distinct models (route × model label sets) each recorded once and scraped.
 * RSS is read as the kernel reports it (no forced GC): what a memory limit meets.
 */

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
const ROOT = resolve(DIST, '..')
const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i < 0 ? undefined : process.argv[i + 1]
}
const STREAMS = Number(argOf('--streams') ?? 1000)
const LABEL_SETS = Number(argOf('--label-sets') ?? 300)
const GAP_MS = 100
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
const MIB = 1024 * 1024
const round = (x: number, digits = 1): number => Math.round(x * 10 ** digits) / 10 ** digits

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-sizing-'))
  const sim = await startPortPrinter(join(DIST, 'src', 'sim', 'cli.js'), [])
  stopOnExit(sim.proc)
  const tt = await startTokentap(DIST, dir, sim.port, { maxModels: LABEL_SETS + 10 })
  stopOnExit(tt.proc)
  const pid = pidOf(tt.proc)
  const url = `http://127.0.0.1:${tt.port}/t/v1/chat/completions`
  const metrics = `http://127.0.0.1:${tt.adminPort}/metrics`
  const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  stopOnExit(load.proc)
  const job = <T>(j: Job): Promise<T> => load.job<T>(j)
  const scrape = (): Promise<unknown> => job({ kind: 'get', url: metrics, times: 1 })

  await job(warmUpJob(url, 'warm'))
  await scrape()
  await sleep(1000)
  const idle = rssBytes([pid])

  const opened = await job<number>({ kind: 'hold', ...request(url, evenPlan(600, GAP_MS)), count: STREAMS, rampPerTick: 50, timeoutMs: 300_000 })
  if (opened !== STREAMS) throw new Error(`${opened} of ${STREAMS} streams opened`)
  await sleep(1500)
  const cpu0 = cpuMicros([pid])
  const t0 = performance.now()
  await sleep(5000)
  const cores = (cpuMicros([pid]) - cpu0) / 1000 / (performance.now() - t0)
  await scrape()
  const open = rssBytes([pid])
  await job({ kind: 'release' })
  await sleep(2500)
  const afterStreams = rssBytes([pid])

  const bodies = Array.from({ length: LABEL_SETS }, (_, i) => requestBody(evenPlan(3, 1), `sizing-model-${i}`))
  await job({ kind: 'streams', url, body: bodies[0], bodies, count: LABEL_SETS, concurrency: 8, phaseMs: 0, idPrefix: 'sets', detail: false })
  await scrape()
  await sleep(1000)
  const withSets = rssBytes([pid])

  const figures = {
    measured: new Date().toISOString().slice(0, 10),
    node: process.versions.node,
    workers: 1,
    idle_rss_mib: round(idle / MIB),
    streams: STREAMS,
    stream_gap_ms: GAP_MS,
    rss_per_open_stream_kib: round((open - idle) / STREAMS / 1024),
    cores_per_open_stream: round(cores / STREAMS, 6),
    label_sets: LABEL_SETS,
    rss_per_label_set_kib: round((withSets - afterStreams) / LABEL_SETS / 1024),
  }
  process.stdout.write(`${JSON.stringify(figures, null, 2)}\n`)
  if (!process.argv.includes('--print')) writeFileSync(join(ROOT, 'bench', 'results', 'pod-sizing.json'), `${JSON.stringify(figures, null, 2)}\n`)
  rmSync(dir, { recursive: true, force: true })
  process.exit(0)
}

void main()
