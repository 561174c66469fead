import type { ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { performance } from 'node:perf_hooks'
import { gapChart } from './chart.ts'
import type { Job, StreamResult } from './load-client.ts'
import { NGINX_HINT, findNginx, startNginx } from './nginx.ts'
import { rssBytes, startLoadClient, startPortPrinter, startTokentap as startTokentapProcess, stopOnExit } from './proc.ts'
import type { LoadClient, TokentapProcess } from './proc.ts'
import { LOAD_CHUNKS, LOAD_GAP_MS, evenPlan, loadJob, requestBody, turns, warmUpJob } from './plans.ts'
import { SAT_CHUNKS, SAT_CONCURRENCY, SAT_STREAMS, saturationPhase } from './saturation-phase.ts'
import { PROMETHEUS_ACCEPT, describeScrape, scrapePhase } from './scrape-phase.ts'
import type { ScrapeDeps } from './scrape-phase.ts'
import { round, sorted, summary } from './stats.ts'
import type { Summary } from './stats.ts'

/**
 * `npm run bench`: direct to the simulator, through a Node TCP relay (bench/tcp-relay.ts), through a
 * bare Node HTTP relay (bench/node-relay.ts), through
 * nginx (when installed) and through tokentap, interleaved round by round, each in its own process (simulator, proxies, load generator).
 * Prints a table, writes bench/results/latest.json and bench/results/gaps.svg.
 * `--quick` runs fewer rounds (a smoke test of the harness, not figures to quote).
 */

const HERE = dirname(fileURLToPath(import.meta.url)) // dist/bench
const ROOT = resolve(HERE, '..', '..')
const DIST = resolve(HERE, '..')
const QUICK = process.argv.includes('--quick')
const LOAD_AT_START = loadavg()[0]
const OUT_DIR = join(ROOT, 'bench', 'results')

/**
 * `tcp-relay`: bench/tcp-relay.ts, bytes copied between two sockets (the floor for a Node process in the path);
 * `node-relay`: bench/node-relay.ts, tokentap's stack with nothing measured (the floor for a Node HTTP proxy).
 */
type Path = 'direct' | 'tcp-relay' | 'node-relay' | 'nginx' | 'tokentap'
const PATH_ORDER: readonly Path[] = ['direct', 'tcp-relay', 'node-relay', 'nginx', 'tokentap']

const P = {
  unloadedRounds: QUICK ? 60 : 400,
  loadLevels: [50, 200],
  loadRounds: QUICK ? 1 : 3,
  loadChunks: LOAD_CHUNKS,
  loadGapMs: LOAD_GAP_MS,
  satStreams: QUICK ? 8 : SAT_STREAMS,
  satConcurrency: SAT_CONCURRENCY,
  satChunks: SAT_CHUNKS,
  satRounds: QUICK ? 1 : 3,
  openStreams: 1000,
  stallChunks: 50_000,
  stallReaders: QUICK ? 20 : 40,
  memoryRepeats: QUICK ? 2 : 3,
  /** Models of the scrape phase's target scale: 11 llm_ histograms each, with the earlier phases' model ≈ 1,000 series. */
  scrapeTargetModels: 90,
  scrapesTarget: QUICK ? 50 : 200,
  /** The stress case: 1,000 models (≈ 11,000 llm_ histogram series). */
  models: 1000,
  scrapes: QUICK ? 5 : 20,
} as const

// ---------------------------------------------------------------- processes

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
process.on('SIGINT', () => process.exit(130))

async function startListener(script: string[], args: string[]): Promise<{ proc: ChildProcess; port: number }> {
  const started = await startPortPrinter(join(DIST, ...script), args)
  stopOnExit(started.proc)
  return started
}

interface LogLine {
  request_id: string
  ttft_ms?: number
  itl_p50_ms?: number
  chunks?: number
}

interface Tokentap extends TokentapProcess {
  lines: Map<string, LogLine>
}

async function startTokentap(dir: string, simPort: number): Promise<Tokentap> {
  const lines = new Map<string, LogLine>()
  const tt = await startTokentapProcess(DIST, dir, simPort, {
    maxModels: P.models + 100,
    onLine(text) {
      if (!text.includes('"msg":"request"')) return
      const l = JSON.parse(text) as LogLine
      lines.set(l.request_id, { request_id: l.request_id, ttft_ms: l.ttft_ms, itl_p50_ms: l.itl_p50_ms, chunks: l.chunks })
    },
  })
  stopOnExit(tt.proc)
  return { ...tt, lines }
}

let load: LoadClient
function startLoad(): void {
  load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  stopOnExit(load.proc)
}
function job<T>(j: Job): Promise<T> {
  return load.job<T>(j)
}

// ---------------------------------------------------------------- phases

async function main(): Promise<void> {
  const t0 = performance.now()
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-bench-'))
  const sim = await startListener(['src', 'sim', 'cli.js'], [])
  const tt = await startTokentap(dir, sim.port)
  const relay = await startListener(['bench', 'node-relay.js'], ['--upstream', `http://127.0.0.1:${sim.port}`])
  const tcpRelay = await startListener(['bench', 'tcp-relay.js'], ['--upstream', `http://127.0.0.1:${sim.port}`])
  const nginxBin = findNginx()
  let nginxPids: number[] = []
  const url: Partial<Record<Path, string>> = {
    direct: `http://127.0.0.1:${sim.port}/v1/chat/completions`,
    'tcp-relay': `http://127.0.0.1:${tcpRelay.port}/v1/chat/completions`,
    'node-relay': `http://127.0.0.1:${relay.port}/v1/chat/completions`,
    tokentap: `http://127.0.0.1:${tt.port}/t/v1/chat/completions`,
  }
  if (nginxBin === undefined) {
    process.stdout.write(`${NGINX_HINT}\n(skipping the nginx columns)\n`)
  } else {
    const ng = await startNginx(nginxBin, join(dir, 'nginx'), sim.port)
    stopOnExit(ng.proc, 'SIGTERM')
    url.nginx = `http://127.0.0.1:${ng.port}/v1/chat/completions`
    nginxPids = ng.pids
  }
  startLoad()
  const paths = (Object.keys(url) as Path[]).sort((a, b) => PATH_ORDER.indexOf(a) - PATH_ORDER.indexOf(b))
  const proxyPids: Partial<Record<Path, number[]>> = { tokentap: [tt.proc.pid!], nginx: nginxPids, 'node-relay': [relay.proc.pid!], 'tcp-relay': [tcpRelay.proc.pid!] }
  const log = (s: string): void => void process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(0)}s] ${s}\n`)

  // Warm up every path (JIT, connection pools).
  log(`paths: ${paths.join(', ')}`)
  for (const p of paths) await job(warmUpJob(url[p]!, `warm-${p}`))

  // --- memory first, on a process that has not yet grown its heap for the heavier phases
  log(`memory: ${P.openStreams} open streams and ${P.stallReaders} stalled readers, ${P.memoryRepeats} times each`)
  const memory: Record<string, number> = {}
  const memoryRuns: Record<string, number[]> = {}
  for (const p of ['tokentap', 'nginx'] as const) {
    const pids = proxyPids[p]
    if (url[p] === undefined || pids === undefined || pids.length === 0) continue
    Object.assign(memory, await memoryPhase(p, url[p]!, pids, tt, memoryRuns))
    if (p === 'tokentap') log(`  tokentap: ${memory.tokentap_rss_per_stream_kib} KiB RSS/stream (heap+external ${memory.tokentap_held_per_stream_kib}), stalled reader ${memory.tokentap_stalled_reader_kib} KiB beyond a reader at the same point (${memory.tokentap_stalled_reader_held_kib} KiB in all, RSS ${memory.tokentap_stalled_reader_rss_kib})`)
    else log(`  ${p}: ${memory[`${p}_rss_per_stream_kib`]} KiB RSS/stream, stalled reader RSS ${memory[`${p}_stalled_reader_rss_kib`]} KiB`)
  }

  // --- unloaded TTFT, one request at a time, paths interleaved
  log('unloaded TTFT')
  const unloaded: Record<string, number[]> = Object.fromEntries(paths.map((p) => [p, []]))
  const ttftBody = requestBody(evenPlan(3, 1))
  const ttResults: StreamResult[] = []
  for (const { round: r, path: p } of turns(paths, P.unloadedRounds)) {
    const [res] = await job<StreamResult[]>({ kind: 'streams', url: url[p]!, body: ttftBody, count: 1, concurrency: 1, phaseMs: 0, idPrefix: `ttft-${p}-${r}`, detail: true })
    if (res.ok) unloaded[p].push(res.ttft)
    if (p === 'tokentap') ttResults.push(res)
  }
  const accuracyUnloaded = await collectAccuracy(tt, ttResults)

  // --- under load
  const loadResults: Record<number, Record<string, { ttft: number[]; distortions: number[]; delays: number[]; results: StreamResult[] }>> = {}
  for (const n of P.loadLevels) {
    log(`load: ${n} streams × ${P.loadChunks} chunks ${P.loadGapMs} ms apart`)
    const acc: (typeof loadResults)[number] = Object.fromEntries(paths.map((p) => [p, { ttft: [], distortions: [], delays: [], results: [] }]))
    for (const { round: r, path: p } of turns(paths, P.loadRounds)) {
      const results = await job<StreamResult[]>(loadJob(url[p]!, n, `load${n}-${p}-${r}`))
      for (const res of results) {
        if (!res.ok) continue
        acc[p].ttft.push(res.ttft)
        acc[p].distortions.push(...res.distortions)
        acc[p].delays.push(...res.delays)
        if (p === 'tokentap') acc[p].results.push(res)
      }
      await sleep(200)
    }
    loadResults[n] = acc
  }
  await sleep(500)
  const accuracyLoad = await collectAccuracy(tt, loadResults[P.loadLevels[0]].tokentap.results)

  // --- saturation: no gaps
  log(`saturation: ${P.satStreams} streams × ${P.satChunks} chunks, no gaps, ${P.satConcurrency} at a time`)
  const sat = await saturationPhase({
    job,
    urls: Object.fromEntries(paths.map((p) => [p, url[p]!])),
    pids: proxyPids,
    body: requestBody(evenPlan(P.satChunks, 0)),
    streams: P.satStreams,
    concurrency: P.satConcurrency,
    rounds: P.satRounds,
  })

  // --- scrape: at the target's scale (≈1,000 llm_ histogram series), then the 1,000-model stress case
  const scrapeDeps: ScrapeDeps = {
    job,
    ask: tt.ask,
    pid: tt.proc.pid!,
    streamUrl: url.tokentap!,
    metricsUrl: `http://127.0.0.1:${tt.adminPort}/metrics`,
    accept: PROMETHEUS_ACCEPT,
    gzip: true,
    body: requestBody,
  }
  log(`scrape: ${P.scrapeTargetModels} models (≈1,000 llm_ histogram series)`)
  const scrapeTarget = await scrapePhase(scrapeDeps, P.scrapeTargetModels, P.scrapesTarget)
  log(`  ${describeScrape(scrapeTarget)}`)
  log(`scrape: ${P.models} models (stress)`)
  const scrapeStress = await scrapePhase(scrapeDeps, P.models, P.scrapes)
  log(`  ${describeScrape(scrapeStress)}`)

  // ---------------------------------------------------------------- report
  const u = Object.fromEntries(paths.map((p) => [p, summary(unloaded[p])])) as Record<Path, Summary>
  const added = (p: Path, q: 'p50' | 'p99'): number => u[p][q] - u.direct[q]
  const loadOut = Object.fromEntries(
    P.loadLevels.map((n) => [
      n,
      Object.fromEntries(paths.map((p) => [p, { ttft: pick(summary(loadResults[n][p].ttft)), gap_distortion: pick(summary(loadResults[n][p].distortions)), one_way_delay: pick(summary(loadResults[n][p].delays)) }])),
    ]),
  ) as Record<number, Record<Path, { ttft: Record<string, number>; gap_distortion: Record<string, number>; one_way_delay: Record<string, number> }>>
  const satOut = Object.fromEntries(paths.map((p) => [p, { chunks_per_s: round(sat[p].chunks / sat[p].seconds, 0), cpu_us_per_chunk: p === 'direct' ? null : round(sat[p].cpuUs / sat[p].chunks, 3), chunks: sat[p].chunks }]))

  const hasNginx = url.nginx !== undefined
  const within = (a: number, b: number): boolean => a <= b * 1.25
  const targets: { target: string; value: string; met: boolean | null }[] = []
  const T = (target: string, value: string, met: boolean | null): void => void targets.push({ target, value, met })
  T('added TTFT p50 ≤ 0.4 ms (unloaded)', `${round(added('tokentap', 'p50'))} ms`, added('tokentap', 'p50') <= 0.4)
  T('added TTFT p99 ≤ 1.5 ms (unloaded)', `${round(added('tokentap', 'p99'))} ms`, added('tokentap', 'p99') <= 1.5)
  for (const n of P.loadLevels) {
    const t = loadOut[n].tokentap
    const g = loadOut[n].nginx
    T(`${n} streams: TTFT p99 within 25% of nginx`, `${t.ttft.p99} ms vs ${g?.ttft.p99 ?? 'n/a'} ms`, hasNginx ? within(t.ttft.p99, g.ttft.p99) : null)
    T(`${n} streams: gap distortion p99 within 25% of nginx`, `${t.gap_distortion.p99} ms vs ${g?.gap_distortion.p99 ?? 'n/a'} ms`, hasNginx ? within(t.gap_distortion.p99, g.gap_distortion.p99) : null)
  }
  const cpuT = satOut.tokentap.cpu_us_per_chunk as number
  const cpuN = hasNginx ? (satOut.nginx.cpu_us_per_chunk as number) : NaN
  T('CPU ≤ 2 µs per content chunk', `${cpuT} µs`, cpuT <= 2)
  T('CPU ≤ 5× nginx', hasNginx ? `${round(cpuT / cpuN, 2)}×` : 'n/a', hasNginx ? cpuT <= 5 * cpuN : null)
  const thr = hasNginx ? satOut.tokentap.chunks_per_s / satOut.nginx.chunks_per_s : NaN
  T('throughput ≥ 0.75× nginx', hasNginx ? `${round(thr, 2)}×` : 'n/a', hasNginx ? thr >= 0.75 : null)
  T('RSS ≤ 32 KiB per in-flight stream', `${memory.tokentap_rss_per_stream_kib} KiB (heap+external ${memory.tokentap_held_per_stream_kib} KiB)`, memory.tokentap_rss_per_stream_kib <= 32)
  T(
    'stalled reader holds ≤ 256 KiB',
    `${memory.tokentap_stalled_reader_kib} KiB beyond a reader at the same point (${memory.tokentap_stalled_reader_held_kib} KiB in all, with the marks of ${memory.tokentap_stalled_reader_chunks} chunks)`,
    memory.tokentap_stalled_reader_kib <= 256,
  )
  const st = scrapeTarget
  T(`scrape ≤ 20 ms (p99 of scrapes, ${st.llm_histogram_series.toLocaleString('en')} llm_ histogram series)`, `${st.ms.p99} ms (p50 ${st.ms.p50} ms)`, st.ms.p99 <= 20)
  T(`event-loop delay p99 ≤ 5 ms during scrapes (${st.llm_histogram_series.toLocaleString('en')} llm_ histogram series)`, `${st.event_loop_delay_ms.p99} ms (same traffic without scrapes: ${st.event_loop_delay_traffic_only_ms.p99} ms)`, st.event_loop_delay_ms.p99 <= 5)
  T('proxy TTFT within 1 ms of client truth at p99', `${accuracyUnloaded.ttft_abs_error_ms.p99} ms (unloaded), ${accuracyLoad.ttft_abs_error_ms.p99} ms (${P.loadLevels[0]} streams)`, Math.max(accuracyUnloaded.ttft_abs_error_ms.p99, accuracyLoad.ttft_abs_error_ms.p99) <= 1)

  const result = {
    date: new Date().toISOString(),
    quick: QUICK,
    machine: machine(nginxBin),
    parameters: P,
    method: {
      paths: 'direct: client to simulator; tcp-relay: bench/tcp-relay.ts, node:net copying bytes between a client socket and its own upstream socket, no HTTP parsing (the least any Node process in the path costs); node-relay: bench/node-relay.ts, node:http + undici writing each upstream chunk on, nothing measured (a plain Node proxy on the same stack); nginx: one worker, proxy_buffering off, keep-alive upstream (a C pass-through proxy); tokentap: the proxy with parsing, token counting, metrics and a log line per request',
      added_ttft: 'percentile of the path minus the same percentile of direct, client-side TTFT (request sent → first content event), one request at a time, paths interleaved',
      gap_distortion: '|client gap − simulator send gap| per content event after the first (simulator stamps tokentap_sent_ms)',
      cpu: 'utime+stime of the proxy process(es) from /proc over the saturation runs, divided by content chunks delivered',
      memory:
        'median of memoryRepeats runs. Per open stream: VmRSS with openStreams streams open (each past its first content event) minus before, divided by openStreams; held_per_stream: heapUsed + external after a full GC in the proxy with the streams open minus the same once they are released and gone, divided by openStreams. ' +
        'Stalled reader: stallReaders clients stop reading a fast stream (stallChunks chunks, no gaps) at once; once no chunk moved for 500 ms, heapUsed + external after a full GC minus the same once they are released and gone, divided by stallReaders = stalled_reader_held (everything such a stream holds, its marks for the chunks the kernel socket buffers took included); ' +
        'stalled_reader_kib = that minus the same for a control of as many streams read normally to the same number of chunks and left open (control_held): what the stall itself pins. RSS deltas (stalled_reader_rss, control_rss) are given for reference: allocator noise dominates them.',
      scrape:
        "bench/scrape-phase.ts, at two scales: `target` (scrapeTargetModels models, plus the earlier phases' one: the scrape's llm_ histogram series, llm_ series and samples are counted in the body and stated) judged against the targets, and `stress` (1,000 models) for information. /metrics fetched back to back with the headers Prometheus sends (OpenMetrics Accept; Accept-Encoding: gzip, which tokentap answers uncompressed), each timed from request to the whole body; bytes = exposition size (wire_bytes would differ if the body were compressed); meanwhile 10 concurrent streams for random models of that scale keep series changing. Event-loop delay from perf_hooks.monitorEventLoopDelay(1 ms) inside the proxy (bench/el-probe.ts): idle, scrapes alone, the same traffic alone, and traffic with scrapes (what the target judges). Proxy CPU per scrape: its utime+stime (/proc) over the scrapes without traffic, divided by their number.",
      accuracy: "proxy log line ttft_ms / itl_p50_ms against the client's own TTFT / median gap for the same request_id",
    },
    unloaded_ttft_ms: Object.fromEntries(paths.map((p) => [p, pick(u[p])])),
    added_ttft_ms: Object.fromEntries(paths.filter((p) => p !== 'direct').map((p) => [p, { p50: round(added(p, 'p50')), p99: round(added(p, 'p99')) }])),
    load: loadOut,
    saturation: satOut,
    memory,
    memory_runs: memoryRuns,
    scrape: { target: scrapeTarget, stress: scrapeStress },
    accuracy: { unloaded: accuracyUnloaded, [`load_${P.loadLevels[0]}`]: accuracyLoad },
    targets,
    seconds: round((performance.now() - t0) / 1000, 0),
  }

  mkdirSync(OUT_DIR, { recursive: true })
  const jsonFile = join(OUT_DIR, QUICK ? 'quick.json' : 'latest.json')
  writeFileSync(jsonFile, JSON.stringify(result, null, 2) + '\n')
  const svg = gapChart(
    P.loadLevels.map((n) => ({ title: `${n} streams, ${P.loadChunks} chunks ${P.loadGapMs} ms apart`, series: paths.map((p) => ({ name: p, values: sorted(loadResults[n][p].distortions) })) })),
    `gap distortion |client gap − sender gap|; ${result.machine.cpu}, ${result.machine.nproc} cores, node ${process.version}, ${result.date.slice(0, 10)}`,
  )
  const svgFile = join(OUT_DIR, QUICK ? 'quick.svg' : 'gaps.svg')
  writeFileSync(svgFile, svg)
  process.stdout.write(table(result, paths))
  process.stdout.write(`\nwrote ${jsonFile}\nwrote ${svgFile}\n`)
  rmSync(dir, { recursive: true, force: true })
  process.exit(0) // its 'exit' stops the children (stopOnExit)
}

// ---------------------------------------------------------------- memory

/** Bytes in use in the proxy after a full GC (tokentap: heap and buffers outside it, from the process itself). */
interface MemorySample {
  readonly rss: number
  /** heapUsed + external (which includes ArrayBuffers): what live objects hold; NaN for nginx. */
  readonly held: number
}

const median = (xs: readonly number[]): number => sorted(xs)[Math.floor((xs.length - 1) / 2)]

/**
 * Memory per open stream and per stalled reader, each repeated and reported as the median:
 * one stream's RSS delta is mostly allocator and heap-page noise, so many streams are measured
 * at once and divided, and tokentap's own heapUsed + external after a full GC is reported beside
 * RSS (it counts live objects only).
 * Stalled readers: `stallReaders` clients stop reading a fast stream; once the proxy stops
 * moving bytes (the kernel's socket buffers took what they could), the memory it holds is
 * sampled. The control is the same number of streams read normally up to the same number of
 * chunks and then idle (still open): the difference is what the stall itself pins (bytes the
 * proxy read but could not write), apart from what any stream that far along holds (its
 * marks, 8 bytes a chunk, and its sockets and objects).
 */
async function memoryPhase(p: 'tokentap' | 'nginx', target: string, pids: number[], tt: Tokentap, runs: Record<string, number[]>): Promise<Record<string, number>> {
  const sample = async (): Promise<MemorySample> => {
    let held = NaN
    if (p === 'tokentap') {
      const m = await tt.ask('gc', 'gc-done')
      held = m.heapUsed + m.external
    }
    await sleep(200)
    return { rss: rssBytes(pids), held }
  }
  const run = (key: string, v: number): void => void (runs[`${p}_${key}`] ??= []).push(round(v, 1))
  const kib = (bytes: number, n: number): number => bytes / n / 1024
  const streamsInFlight = async (): Promise<{ n: number; chunks: number }> => {
    const r = (await (await fetch(`http://127.0.0.1:${tt.adminPort}/debug/streams`)).json()) as { in_flight: number; streams: { chunks: number }[] }
    return { n: r.in_flight, chunks: r.streams.reduce((a, s) => a + s.chunks, 0) }
  }
  // tokentap: until no request is in flight (released streams have finished recording), so a
  // baseline never still holds the previous step's streams.
  const idle = async (): Promise<void> => {
    if (p !== 'tokentap') return
    for (let i = 0; i < 100 && (await streamsInFlight()).n > 0; i++) await sleep(100)
  }
  const holdBody = requestBody(evenPlan(600, 100))
  const stallBody = requestBody(evenPlan(P.stallChunks, 0))
  let rssBefore = 0
  let rssOpen = 0
  for (let r = 0; r < P.memoryRepeats; r++) {
    // Open streams: each has its first content event and waits for the next (100 ms apart).
    await sleep(500)
    await idle()
    const before = await sample()
    const opened = await job<number>({ kind: 'hold', url: target, body: holdBody, count: P.openStreams })
    await sleep(1500)
    const open = await sample()
    await job({ kind: 'release' })
    run('rss_per_stream_kib', kib(open.rss - before.rss, opened))
    run('rss_per_stream_max_kib', kib(open.rss - before.rss, opened))
    // Live memory against the state after the streams are gone: leftovers of an earlier step
    // still being freed at `before` would otherwise be subtracted from this one.
    await idle()
    const after = await sample()
    if (p === 'tokentap') run('held_per_stream_kib', kib(open.held - after.held, opened))
    if (r === 0) {
      rssBefore = before.rss
      rssOpen = open.rss
    }
    // Let the cancelled streams finish recording before the next baseline.
    await sleep(2500)

    // Stalled readers.
    await idle()
    const s0 = await sample()
    const stalled = await job<number>({ kind: 'stall', url: target, body: stallBody, count: P.stallReaders })
    let chunks = NaN
    if (p === 'tokentap') {
      // Settled when no stream moved a chunk for 500 ms.
      let prev = -1
      for (let i = 0; i < 60; i++) {
        await sleep(500)
        const f = await streamsInFlight()
        if (f.chunks === prev) break
        prev = f.chunks
      }
      chunks = prev / stalled
    } else await sleep(3000)
    const s1 = await sample()
    await job({ kind: 'release' })
    run('stalled_reader_rss_kib', kib(s1.rss - s0.rss, stalled))
    await idle()
    const s2 = await sample()
    if (p === 'tokentap') {
      run('stalled_reader_held_kib', kib(s1.held - s2.held, stalled))
      run('stalled_reader_chunks', chunks)
    }
    await sleep(2500)
    if (p !== 'tokentap') continue

    // Control: as many streams, read normally up to the same number of chunks, then idle.
    const k = Math.max(2, Math.round(chunks))
    const controlBody = requestBody({ ttft_ms: 0, chunks: [...Array.from({ length: k - 1 }, () => [0, 1]), [600_000, 1]] })
    await idle()
    const c0 = await sample()
    await job<number>({ kind: 'hold', url: target, body: controlBody, count: P.stallReaders })
    // Read to the same point: every control stream has its k chunks (the proxy's count).
    let reading = 0
    for (let i = 0; i < 100; i++) {
      const r = (await (await fetch(`http://127.0.0.1:${tt.adminPort}/debug/streams`)).json()) as { streams: { chunks: number }[] }
      reading = r.streams.length
      if (reading === P.stallReaders && r.streams.every((x) => x.chunks >= k)) break
      await sleep(200)
    }
    await sleep(500)
    const c1 = await sample()
    await job({ kind: 'release' })
    await idle()
    const c2 = await sample()
    run('control_held_kib', kib(c1.held - c2.held, reading))
    run('control_rss_kib', kib(c1.rss - c0.rss, reading))
    run('stalled_reader_kib', kib(s1.held - s2.held, stalled) - kib(c1.held - c2.held, reading))
    await sleep(2500)
  }
  const out: Record<string, number> = {
    [`${p}_open_streams`]: P.openStreams,
    [`${p}_rss_before_mib`]: round(rssBefore / 2 ** 20, 1),
    [`${p}_rss_open_mib`]: round(rssOpen / 2 ** 20, 1),
    [`${p}_stalled_readers`]: P.stallReaders,
  }
  for (const [key, xs] of Object.entries(runs)) if (key.startsWith(`${p}_`)) out[key] = round(key.endsWith('_max_kib') ? Math.max(...xs) : median(xs), key.endsWith('chunks') ? 0 : 1)
  return out
}

// ---------------------------------------------------------------- helpers

function pick(s: Summary): Record<string, number> {
  return { n: s.n, p50: round(s.p50), p90: round(s.p90), p99: round(s.p99), max: round(s.max), mean: round(s.mean) }
}

async function collectAccuracy(tt: Tokentap, results: readonly StreamResult[]): Promise<{ requests: number; ttft_error_ms: Record<string, number>; ttft_abs_error_ms: Record<string, number>; itl_p50_abs_error_ms: Record<string, number> }> {
  for (let i = 0; i < 50 && results.some((r) => !tt.lines.has(r.id)); i++) await sleep(100)
  const ttftErr: number[] = []
  const itlErr: number[] = []
  for (const r of results) {
    const line = tt.lines.get(r.id)
    if (line?.ttft_ms === undefined || !Number.isFinite(r.ttft)) continue
    ttftErr.push(line.ttft_ms - r.ttft)
    if (r.gaps.length > 0 && line.itl_p50_ms !== undefined) itlErr.push(Math.abs(line.itl_p50_ms - summary(r.gaps).p50))
  }
  const signed = summary(ttftErr)
  return {
    requests: ttftErr.length,
    ttft_error_ms: { mean: round(signed.mean), p50: round(signed.p50) },
    ttft_abs_error_ms: pick(summary(ttftErr.map(Math.abs))),
    itl_p50_abs_error_ms: pick(summary(itlErr)),
  }
}

function machine(nginxBin: string | undefined): { nproc: number; cpu: string; node: string; nginx: string | null; kernel: string; loadavg_1m_at_start: number; loadavg_1m_at_end: number } {
  let cpu = cpus()[0]?.model ?? 'unknown'
  try {
    const m = /model name\s*:\s*(.+)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))
    if (m !== null) cpu = m[1].trim()
  } catch {
    // not Linux
  }
  let kernel = ''
  try {
    kernel = readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim()
  } catch {
    // not Linux
  }
  // Other work on the machine skews every figure: the load average says how busy it was.
  return { nproc: cpus().length, cpu, node: process.version, nginx: nginxBin ?? null, kernel, loadavg_1m_at_start: round(LOAD_AT_START, 2), loadavg_1m_at_end: round(loadavg()[0], 2) }
}

function table(r: any, paths: Path[]): string {
  const rows: string[][] = []
  const col = (p: Path): string => p
  const line = (...cells: (string | number | null | undefined)[]): void => void rows.push(cells.map((c) => (c === undefined || c === null ? '–' : String(c))))
  line('metric', ...paths.map(col))
  line('unloaded TTFT p50 (ms)', ...paths.map((p) => r.unloaded_ttft_ms[p].p50))
  line('unloaded TTFT p99 (ms)', ...paths.map((p) => r.unloaded_ttft_ms[p].p99))
  line('added TTFT p50 (ms)', ...paths.map((p) => (p === 'direct' ? 0 : r.added_ttft_ms[p].p50)))
  line('added TTFT p99 (ms)', ...paths.map((p) => (p === 'direct' ? 0 : r.added_ttft_ms[p].p99)))
  for (const n of P.loadLevels) {
    line(`${n} streams: TTFT p99 (ms)`, ...paths.map((p) => r.load[n][p].ttft.p99))
    line(`${n} streams: gap distortion p50 (ms)`, ...paths.map((p) => r.load[n][p].gap_distortion.p50))
    line(`${n} streams: gap distortion p99 (ms)`, ...paths.map((p) => r.load[n][p].gap_distortion.p99))
    line(`${n} streams: gap distortion max (ms)`, ...paths.map((p) => r.load[n][p].gap_distortion.max))
    line(`${n} streams: one-way delay p99 (ms)`, ...paths.map((p) => r.load[n][p].one_way_delay.p99))
  }
  line('saturation: chunks/s', ...paths.map((p) => r.saturation[p].chunks_per_s))
  line('saturation: CPU µs/chunk', ...paths.map((p) => r.saturation[p].cpu_us_per_chunk))
  line('RSS per open stream (KiB)', ...paths.map((p) => r.memory[`${p}_rss_per_stream_kib`]))
  line('heap+external per open stream (KiB)', ...paths.map((p) => r.memory[`${p}_held_per_stream_kib`]))
  line('stalled reader: RSS (KiB)', ...paths.map((p) => r.memory[`${p}_stalled_reader_rss_kib`]))
  line('stalled reader: held in all (KiB)', ...paths.map((p) => r.memory[`${p}_stalled_reader_held_kib`]))
  line('stalled reader: beyond a reader (KiB)', ...paths.map((p) => r.memory[`${p}_stalled_reader_kib`]))
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)))
  let out = '\n' + rows.map((row) => row.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ')).join('\n') + '\n'
  out += `\nscrape, target scale: ${describeScrape(r.scrape.target)}\nscrape, stress: ${describeScrape(r.scrape.stress)}\n`
  for (const [k, a] of Object.entries(r.accuracy) as [string, any][]) {
    out += `accuracy (${k}, ${a.requests} requests): TTFT |proxy − client| mean ${a.ttft_abs_error_ms.mean} ms, p99 ${a.ttft_abs_error_ms.p99} ms; ITL p50 |error| mean ${a.itl_p50_abs_error_ms.mean} ms, p99 ${a.itl_p50_abs_error_ms.p99} ms\n`
  }
  out += `\ntargets (${r.machine.cpu}, ${r.machine.nproc} cores, node ${r.machine.node}, load average ${r.machine.loadavg_1m_at_start} → ${r.machine.loadavg_1m_at_end}):\n`
  for (const t of r.targets) out += `  ${t.met === null ? 'n/a ' : t.met ? 'met ' : 'MISS'}  ${t.target}: ${t.value}\n`
  return out
}

await main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
