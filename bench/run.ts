import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { type ClusterScrapeFigures, clusterScrape, describeClusterScrape } from './cluster-phase.ts'
import { type LoadFigures, loadFigures, pairedRounds, pick, turnRounds } from './load-phase.ts'
import { type MemoryRuns, memoryPhase } from './memory-phase.ts'
import { describeOtel, otelPhase } from './otel-phase.ts'
import { LOAD_CHUNKS, LOAD_GAP_MS, SHORT_CHUNKS, SHORT_CONCURRENCY, type Target, evenPlan, requestBody, warmUpJob } from './plans.ts'
import { type LoadClient, type TokentapProcess, machine, pidOf, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from './proc.ts'
import { SAT_CHUNKS, SAT_CONCURRENCY, saturationPhase } from './saturation-phase.ts'
import { PROMETHEUS_ACCEPT, type ScrapeFigures, describeScrape, scrapeAtSeries, servesProtobuf } from './scrape-phase.ts'
import { round, summary } from './stats.ts'
import { emptyInputs, floorRows, issueTargets } from './targets.ts'
import { blockP50, overheadFigures, unloadedPhase } from './unloaded-phase.ts'
import { type TargetRow, describeTarget, targetList } from './verdict.ts'

/**
 * `npm run bench`: the figures docs/performance.md quotes ("What it compares", "How each measure
 * is taken"). The simulator, the load generator and each path in its own process (direct, the TCP,
 * Node and Fastify relays, tokentap), interleaved round by round; the phases in PHASES' order.
 * Prints a table and the targets (bench/targets.ts, judged by bench/verdict.ts's rule) and writes
 * bench/results/latest.json; `--quick`: fewer rounds, a smoke test; `--only P[,P…]`: those phases.
 */

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const ROOT = resolve(DIST, '..')
const QUICK = process.argv.includes('--quick')
const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i < 0 ? undefined : process.argv[i + 1]
}
const PHASES = ['memory', 'unloaded', 'load', 'saturation', 'cpu-short', 'otel', 'traces', 'scrape', 'cluster'] as const
type Phase = (typeof PHASES)[number]
const ONLY = argOf('--only')?.split(',')
const unknown = ONLY?.filter((p) => !(PHASES as readonly string[]).includes(p)) ?? []
if (unknown.length > 0) throw new Error(`--only takes ${PHASES.join(', ')} (comma-separated), not ${unknown.join(', ')} (the rest: npm run bench:lab)`)
const runs = (...ps: Phase[]): boolean => ps.some((p) => ONLY === undefined || ONLY.includes(p))
const CPU_PROF = argOf('--cpu-prof')
const OTEL_PROF = argOf('--otel-cpu-prof')
const LOAD_AT_START = loadavg()[0]

const P = {
  unloadedRounds: QUICK ? 60 : 450,
  /** Unloaded rounds per block: a block's p50 is one "round" of the added-TTFT target (9 blocks). */
  unloadedBlock: QUICK ? 20 : 50,
  loadLevels: [50, 200],
  /** Rounds in which every path takes a turn (the table and the floors). */
  loadRounds: QUICK ? 1 : 3,
  /** tokentap's rounds of the paired load phase: three rounds in one run read 0.51–3.33 ×; a median of 11 with its quartiles can be judged. */
  pairRounds: QUICK ? 3 : 11,
  loadChunks: LOAD_CHUNKS,
  loadGapMs: LOAD_GAP_MS,
  satStreams: QUICK ? 8 : 24,
  satConcurrency: SAT_CONCURRENCY,
  satChunks: SAT_CHUNKS,
  satRounds: QUICK ? 1 : 5,
  shortRequests: QUICK ? 200 : 1200,
  shortChunks: SHORT_CHUNKS,
  shortConcurrency: SHORT_CONCURRENCY,
  /** The host moves one round by up to ±50 %, so the median needs many (5 rounds read 1.02-2.16 × in one run). */
  shortRounds: Number(argOf('--short-rounds') ?? (QUICK ? 3 : 15)),
  /** Uncounted requests first: after 2,000, tokentap's first round still read 1.8-1.9 × its later ones (V8 compiles on its own threads, whose time counts). */
  shortWarmUp: QUICK ? 100 : 5000,
  /** The OTel and traces rounds: two fresh tokentap processes per round (export off and on), loaded at once. */
  otelRequests: QUICK ? 500 : 3000,
  /** Even: as many rounds with either process started and loaded first. */
  otelRounds: QUICK ? 2 : 6,
  otelWarmRequests: QUICK ? 500 : 5000,
  /**
   * The traces round's requests between its first window and its steady one: in a fresh process
   * under this load V8 still compiles the export's serialiser and HTTP client between requests
   * 3,000 and 16,000 (`--trace-opt`; the other threads' excess falls to ≈ 2 µs a request after
   * 17,000), so the steady window starts at 18,300 (docs/performance.md, "Spans").
   */
  tracesSteadyWarmRequests: QUICK ? 500 : 10_000,
  /**
   * The steady window's requests: each process runs a mark-compact every ≈ 4,000 requests here, and
   * a window of 3,000 held one or none (rounds of 1.02–1.08 and two of 1.2 in one run); windows of
   * 10,000 hold two or three, and read within ± 2 % of each other (docs/performance.md, "Spans").
   */
  tracesSteadyRequests: QUICK ? 500 : 10_000,
  otelIntervalMs: Number(argOf('--otel-interval-ms') ?? 1000),
  openStreams: QUICK ? 200 : 1000,
  memoryRepeats: QUICK ? 1 : 3,
  /** The scrape phase's scales, in llm_ histogram series, and its scrapes at each. */
  seriesScales: QUICK ? [100, 1000] : [100, 1000, 10_000],
  scrapesAt: QUICK ? [20, 50] : [50, 200, 40],
  /** Room for the models the largest scale loads. */
  maxModels: 2000,
  /** The cluster comparison's label sets (issue 35). */
  clusterSets: QUICK ? [100, 1000] : [100, 1000, 4000],
} as const

process.on('SIGINT', () => process.exit(130))
const t0 = performance.now()
const log = (s: string): void => void process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(0)}s] ${s}\n`)
let load: LoadClient
const job = <T>(j: Parameters<LoadClient['job']>[0]): Promise<T> => load.job<T>(j)

/** A Node script of ours that prints its port (the simulator, a relay), stopped when the bench exits; `probe`: bench/el-probe.ts preloaded. */
async function listener(script: string[], args: string[], probe = false) {
  const started = await startPortPrinter(join(DIST, ...script), args, probe ? join(DIST, 'bench', 'el-probe.js') : undefined)
  stopOnExit(started.proc)
  return { pid: pidOf(started.proc), port: started.port, ask: started.ask, kill: () => started.proc.kill('SIGKILL') }
}
const relay = (simPort: number, script: string, ...more: string[]) => listener(['bench', script], ['--upstream', `http://127.0.0.1:${simPort}`, ...more], true)
const chatUrl = (port: number, prefix = ''): string => `http://127.0.0.1:${port}${prefix}/v1/chat/completions`
const perRequestMs = (f: { cpuUs: number; requests: number }): number => f.cpuUs / f.requests / 1000
const perChunk = (f: { cpuUs: number; chunks: number }): number => f.cpuUs / f.chunks

async function tokentap(dir: string, simPort: number): Promise<TokentapProcess> {
  // Its errors are shown (a failed scrape cuts the body short: the load client only sees "aborted").
  const onLine = (line: string): void => void (/"level":[56]0/.test(line) && process.stderr.write(`tokentap: ${line}\n`))
  const flags = CPU_PROF === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', resolve(CPU_PROF)]
  const tt = await startTokentap(DIST, dir, simPort, { maxModels: P.maxModels, flags, onLine })
  stopOnExit(tt.proc)
  return tt
}

async function main(dir: string): Promise<void> {
  const result: Record<string, unknown> = { method: 'docs/performance.md, “How each measure is taken”; verdicts: bench/verdict.ts' }
  const inputs = emptyInputs(P.openStreams)
  const rows: string[][] = []
  let notes = ''
  const sim = await listener(['src', 'sim', 'cli.js'], [])

  if (runs('memory', 'unloaded', 'load', 'saturation', 'cpu-short', 'scrape')) {
    const tt = await tokentap(dir, sim.port)
    const targets: Record<string, Target> = { direct: { url: chatUrl(sim.port) } }
    const pids: Record<string, number[]> = { tokentap: [pidOf(tt.proc)] }
    const asks: Record<string, TokentapProcess['ask']> = { tokentap: tt.ask }
    const relays: { kill(): void }[] = []
    if (runs('memory', 'unloaded', 'load', 'saturation', 'cpu-short')) {
      for (const [name, r] of [
        ['tcp-relay', await relay(sim.port, 'tcp-relay.js')],
        ['node-relay', await relay(sim.port, 'node-relay.js')],
        ['fastify-relay', await relay(sim.port, 'node-relay.js', '--fastify')],
      ] as const) {
        targets[name] = { url: chatUrl(r.port) }
        pids[name] = [r.pid]
        asks[name] = r.ask
        relays.push(r)
      }
    }
    targets.tokentap = { url: chatUrl(tt.port, '/t') }
    const paths = Object.keys(targets)
    const proxies = paths.filter((p) => p !== 'direct')
    for (const p of paths) await job(warmUpJob(targets[p], `warm-${p}`))
    rows.push(['metric', ...paths])
    const line = (name: string, f: (p: string) => number | string | null | undefined): void => {
      const cells = paths.map((p) => String(f(p) ?? '–').replace(/^NaN$/, '–'))
      if (cells.some((c) => c !== '–')) rows.push([name, ...cells])
    }

    if (runs('memory')) {
      // First, on processes that have not yet grown their heaps for the heavier phases.
      log(`memory: ${P.openStreams} open streams`)
      const inFlight = async (): Promise<number> => ((await (await fetch(`http://127.0.0.1:${tt.adminPort}/debug/streams`)).json()) as { in_flight: number }).in_flight
      const memory: Record<string, MemoryRuns> = {}
      for (const p of ['tokentap', 'node-relay', 'tcp-relay']) {
        memory[p] = await memoryPhase({ job, target: targets[p], pids: pids[p], ask: asks[p], inFlight: p === 'tokentap' ? inFlight : undefined }, P.openStreams, P.memoryRepeats)
        log(`  ${p}: RSS ${memory[p].rss.join(', ')} KiB/stream, heap+external ${memory[p].held.join(', ')} KiB/stream`)
      }
      result.memory = memory
      inputs.held = Object.fromEntries(Object.entries(memory).map(([p, m]) => [p, m.held]))
      inputs.rss = Object.fromEntries(Object.entries(memory).map(([p, m]) => [p, m.rss]))
      line('RSS per open stream (KiB, median)', (p) => (memory[p] === undefined ? null : summary(memory[p].rss).p50))
      line('heap+external per open stream (KiB, median)', (p) => (memory[p] === undefined ? null : summary(memory[p].held).p50))
    }

    if (runs('unloaded')) {
      log(`unloaded TTFT: ${P.unloadedRounds} rounds`)
      const unloaded = await unloadedPhase({ job, targets, metricsUrl: `http://127.0.0.1:${tt.adminPort}/metrics` }, P.unloadedRounds)
      const ttft = (p: string): ReturnType<typeof summary> => summary(unloaded.ttft[p])
      const ref = blockP50(unloaded.ttft.direct, P.unloadedBlock)
      inputs.addedBlocks = Object.fromEntries(proxies.map((p) => [p, blockP50(unloaded.ttft[p], P.unloadedBlock).map((v, i) => v - ref[i])]))
      const added = (p: string) => ({ p50: round(ttft(p).p50 - ttft('direct').p50), p99: round(ttft(p).p99 - ttft('direct').p99), blocks_p50: inputs.addedBlocks[p].map((v) => round(v)) })
      const o = overheadFigures(unloaded)
      inputs.overhead = o
      Object.assign(result, { unloaded_ttft_ms: Object.fromEntries(paths.map((p) => [p, pick(ttft(p))])), added_ttft_ms: Object.fromEntries(proxies.map((p) => [p, added(p)])), overhead: o })
      line('unloaded TTFT p50 (ms)', (p) => round(ttft(p).p50))
      line('added TTFT p50 (ms)', (p) => (p === 'direct' ? null : added(p).p50))
      notes += `${o.metric} p50 (unloaded): ${o.p50_ms ?? 'n/a'} ms; client side ${o.client_added_first_chunk_p50_ms} ms over direct, ${o.client_added_beyond_hop_p50_ms} ms beyond the TCP relay's ${o.hop_first_chunk_p50_ms} ms\n`
    }

    if (runs('load')) {
      const loadFig: Record<number, Record<string, LoadFigures>> = {}
      for (const n of P.loadLevels) {
        log(`load: ${n} streams × ${P.loadChunks} chunks ${P.loadGapMs} ms apart, every path, ${P.loadRounds} rounds; then ${P.pairRounds} paired rounds`)
        const acc = await turnRounds({ job, targets, asks }, n, P.loadRounds)
        loadFig[n] = Object.fromEntries(paths.map((p) => [p, loadFigures(acc[p])]))
        inputs.turns[n] = Object.fromEntries(paths.map((p) => [p, acc[p].rounds]))
        const pr = await pairedRounds({ job, targets, asks }, n, P.pairRounds, 'fastify-relay', 'tokentap')
        inputs.pair[n] = { tokentap: pr.subject.rounds, relay: pr.relay.rounds }
        line(`${n} streams: TTFT p99 (ms)`, (p) => loadFig[n][p].ttft.p99)
        line(`${n} streams: gap distortion p99 (ms)`, (p) => loadFig[n][p].gap_distortion.p99)
        line(`${n} streams: event-loop delay p99 (ms)`, (p) => loadFig[n][p].inside?.event_loop_delay_p99_ms)
        line(`${n} streams: GC pauses n / total ms`, (p) => (loadFig[n][p].inside === null ? null : `${loadFig[n][p].inside?.gc_count} / ${loadFig[n][p].inside?.gc_ms}`))
      }
      inputs.loadLevels = P.loadLevels
      Object.assign(result, { load: loadFig, load_pairs: inputs.pair })
    }

    if (runs('saturation')) {
      log(`saturation: ${P.satStreams} streams × ${P.satChunks} chunks, no gaps, ${P.satConcurrency} at a time, ${P.satRounds} rounds`)
      const sat = await saturationPhase({ job, urls: targets, pids, plan: evenPlan(P.satChunks, 0), streams: P.satStreams, concurrency: P.satConcurrency, rounds: P.satRounds })
      inputs.satCpu = Object.fromEntries(proxies.map((p) => [p, sat[p].rounds.map(perChunk)]))
      const figures = (p: string) => ({
        chunks_per_s: round(sat[p].chunks / sat[p].seconds, 0),
        cpu_us_per_chunk: p === 'direct' ? null : round(perChunk(sat[p]), 3),
        rounds: sat[p].rounds.map((r) => round(r.chunks / r.seconds, 0)),
      })
      result.saturation = Object.fromEntries(paths.map((p) => [p, figures(p)]))
      line('saturation: chunks/s', (p) => figures(p).chunks_per_s)
      line('saturation: CPU µs/chunk', (p) => figures(p).cpu_us_per_chunk)
    }

    if (runs('cpu-short')) {
      log(`short requests: ${P.shortRounds} rounds of ${P.shortRequests} × ${P.shortChunks} content chunks, ${P.shortConcurrency} at a time`)
      const urls = Object.fromEntries(proxies.map((p) => [p, targets[p]]))
      const common = { job, urls, pids, plan: evenPlan(P.shortChunks, 0), streams: P.shortRequests, concurrency: P.shortConcurrency, idPrefix: 'short' }
      const short = await saturationPhase({ ...common, rounds: P.shortRounds, warmUp: P.shortWarmUp })
      inputs.short = Object.fromEntries(proxies.map((p) => [p, short[p].rounds.map(perRequestMs)]))
      result.short_requests = Object.fromEntries(proxies.map((p) => [p, { cpu_ms_per_request: round(perRequestMs(short[p]), 3), rounds: inputs.short[p].map((r) => round(r, 3)) }]))
      line('short request: CPU ms/request', (p) => (p === 'direct' ? null : round(perRequestMs(short[p]), 3)))
    }

    for (const r of relays) r.kill()
    if (runs('scrape')) {
      // On tokentap alone: /metrics at its scales, in both formats when tokentap serves protobuf.
      const metricsUrl = `http://127.0.0.1:${tt.adminPort}/metrics`
      const deps = { job, ask: tt.ask, pid: pidOf(tt.proc), streamUrl: targets.tokentap.url, metricsUrl, accept: PROMETHEUS_ACCEPT, gzip: true, body: requestBody }
      const protobuf = await servesProtobuf(deps)
      log(`scrape: ${P.seriesScales.join(' → ')} llm_ histogram series, text${protobuf ? ' and protobuf' : ''}`)
      const scales: ScrapeFigures[] = []
      for (const [i, series] of P.seriesScales.entries()) {
        scales.push(await scrapeAtSeries(deps, series, P.scrapesAt[i], protobuf))
        log(`  ${describeScrape(scales[i])}`)
      }
      result.scrape = inputs.scales = scales
      notes += scales.map((s) => `scrape: ${describeScrape(s)}\n`).join('')
    }
    // A CPU profile is written on a normal exit only: SIGTERM drains, then the process exits.
    const exited = new Promise((r) => tt.proc.once('exit', r))
    tt.proc.kill(CPU_PROF === undefined ? 'SIGKILL' : 'SIGTERM')
    await exited
  }

  for (const signal of ['metrics', 'traces'] as const) {
    if (!runs(signal === 'metrics' ? 'otel' : 'traces')) continue
    log(`${signal === 'traces' ? 'traces' : 'OTel'} round: ${P.otelRounds} × ${P.otelRequests} requests through tokentap with the export off and on at once`)
    const o = { job, dist: DIST, simPort: sim.port, maxModels: 100, chunks: P.shortChunks, requests: P.otelRequests, concurrency: P.shortConcurrency, rounds: P.otelRounds }
    const cpuProfDir = OTEL_PROF === undefined ? undefined : resolve(OTEL_PROF)
    const r = await otelPhase({
      ...o,
      warmRequests: P.otelWarmRequests,
      intervalMs: P.otelIntervalMs,
      control: process.argv.includes('--otel-control'),
      signal,
      steadyWarmRequests: signal === 'traces' ? P.tracesSteadyWarmRequests : 0,
      steadyRequests: P.tracesSteadyRequests,
      cpuProfDir,
      traceGc: process.argv.includes('--otel-trace-gc'),
      log,
    })
    log(`  ${describeOtel(r)}`)
    result[signal === 'metrics' ? 'otel_short_requests' : 'traces_short_requests'] = r
    if (signal === 'metrics') inputs.otel = r.ratios
    else {
      inputs.traces = r.ratios
      inputs.tracesFresh = r.fresh_ratios
      inputs.tracesStartMs = r.start_cost_ms
      inputs.tracesWindows = { fresh: r.windows_from.first, steady: r.windows_from.steady, steadyRequests: r.steady_requests_per_round }
    }
  }
  sim.kill()

  if (runs('cluster')) {
    // In this process, with the others stopped: its CPU time is the figure.
    log(`cluster /metrics: ${P.clusterSets.join(', ')} label sets, one process against workers: 2`)
    const cluster: ClusterScrapeFigures[] = []
    for (const sets of P.clusterSets) {
      cluster.push(await clusterScrape(sets))
      log(`  ${describeClusterScrape(cluster[cluster.length - 1])}`)
    }
    result.cluster_scrape = inputs.cluster = cluster
  }

  const list = targetList()
  issueTargets(inputs, list)
  const floors = targetList()
  floorRows(inputs, floors)
  rmSync(dir, { recursive: true, force: true })
  // One table: a row a measure, a column a path.
  let table = ''
  if (rows.length > 1) {
    const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)))
    table = `\n${rows.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ')).join('\n')}\n`
  }
  finish(ONLY === undefined ? 'latest' : ONLY.join('+'), result, list.targets, floors.targets, `${table}\n${notes}`)
}

/** Writes the result, prints the targets (and `before` them), exits (the children stop with the bench, stopOnExit). */
function finish(name: string, result: Record<string, unknown>, targets: readonly TargetRow[], floors: readonly TargetRow[], before: string): never {
  const m = machine(LOAD_AT_START)
  const seconds = round((performance.now() - t0) / 1000, 0)
  const dir = join(ROOT, 'bench', 'results')
  mkdirSync(dir, { recursive: true })
  const file = join(dir, QUICK ? `quick.${name}.json` : `${name}.json`)
  writeFileSync(file, `${JSON.stringify({ date: new Date().toISOString(), quick: QUICK, only: ONLY, machine: m, parameters: P, ...result, targets, floors, seconds }, null, 2)}\n`)
  let out = `${before}\ntargets (${m.cpu}, ${m.nproc} cores, node ${m.node}, load average ${m.loadavg_1m_at_start} → ${m.loadavg_1m_at_end}, ${seconds} s):\n`
  out += targets.map((t) => `${describeTarget(t)}\n`).join('')
  if (floors.length > 0) out += `\nfor information (a ratio is the first path over the second):\n${floors.map((t) => `  ${t.target}: ${t.value}\n`).join('')}`
  process.stdout.write(`${out}\nwrote ${file}\n`)
  process.exit(0)
}

const dir = mkdtempSync(join(tmpdir(), 'tokentap-bench-'))
load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
stopOnExit(load.proc)
await main(dir).catch((err: unknown) => {
  process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
