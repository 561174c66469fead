import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import type { Job } from './load-client.ts'
import { type Ask, type LoadFigures, loadFigures, pairedRounds, pick, turnRounds } from './load-phase.ts'
import { memoryPhase } from './memory-phase.ts'
import type { MemoryRuns } from './memory-phase.ts'
import { OTEL_RATIO_TARGET, TRACES_RATIO_TARGET, describeOtel, otelPhase } from './otel-phase.ts'
import type { OtelPhaseResult } from './otel-phase.ts'
import { LOAD_CHUNKS, LOAD_GAP_MS, SHORT_CHUNKS, SHORT_CONCURRENCY, evenPlan, requestBody, warmUpJob } from './plans.ts'
import type { Target } from './plans.ts'
import { type LoadClient, type TokentapProcess, machine, pidOf, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from './proc.ts'
import { SAT_CHUNKS, SAT_CONCURRENCY, saturationPhase } from './saturation-phase.ts'
import type { SaturationFigures } from './saturation-phase.ts'
import { PROMETHEUS_ACCEPT, describeScrape, scrapeAtSeries, servesProtobuf } from './scrape-phase.ts'
import type { ScrapeFigures } from './scrape-phase.ts'
import { round, summary } from './stats.ts'
import { floorRows, issueTargets, scrapeTargets, shortTargets } from './targets.ts'
import type { TargetInputs } from './targets.ts'
import { describeTarget, targetList } from './verdict.ts'
import type { TargetRow } from './verdict.ts'
import { blockP50, overheadFigures, unloadedPhase } from './unloaded-phase.ts'

/**
 * `npm run bench`: the figures docs/performance.md quotes. The simulator, the load generator and
 * each path in its own process: direct to the simulator, a Node TCP relay (bench/tcp-relay.ts), a
 * bare Node HTTP relay and the same behind a Fastify route (bench/node-relay.ts), and tokentap,
 * interleaved round by round. Phases: memory per open stream, unloaded TTFT (with tokentap's own
 * overhead histogram beside it), load (rounds every path takes, then paired rounds of tokentap and
 * the Fastify relay), saturation, CPU per short request, the OTel round, /metrics at its scales.
 * Prints a table and the targets (bench/targets.ts, each judged by bench/verdict.ts's rule) and
 * writes bench/results/latest.json (quick.json with `--quick`: fewer rounds, a smoke test).
 * `--only PHASE` runs one part with its targets and writes bench/results/PHASE.json:
 * `cpu-short` (CPU per short request and the OTel round; `--cpu-prof DIR`: tokentap's CPU profile),
 * `otel`, `traces` (the OTel round with spans instead of metrics), `scrape`.
 * The OTel round: `--otel-interval-ms N`, `--otel-cpu-prof DIR`, `--otel-control` (export off in both),
 * `--otel-trace-gc` (both processes under `--trace-gc`, each round's collections logged).
 * The research tools (instruction counts, growth, other proxies) are in bench/lab/ (`npm run bench:lab`).
 */

const HERE = dirname(fileURLToPath(import.meta.url)) // dist/bench
const ROOT = resolve(HERE, '..', '..')
const DIST = resolve(HERE, '..')
const OUT_DIR = join(ROOT, 'bench', 'results')
const QUICK = process.argv.includes('--quick')
const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i < 0 ? undefined : process.argv[i + 1]
}
const ONLY_PHASES = ['cpu-short', 'otel', 'traces', 'scrape'] as const
type OnlyPhase = (typeof ONLY_PHASES)[number]
const ONLY = argOf('--only')
if (ONLY !== undefined && !(ONLY_PHASES as readonly string[]).includes(ONLY)) throw new Error(`--only takes ${ONLY_PHASES.join(', ')}, not ${ONLY} (the rest: npm run bench:lab)`)
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
  /** The OTel round: two fresh tokentap processes per round (export off and on), loaded at once. */
  otelRequests: QUICK ? 500 : 3000,
  /** Even: as many rounds with either process started and loaded first. */
  otelRounds: QUICK ? 2 : 6,
  otelWarmRequests: QUICK ? 500 : 5000,
  otelIntervalMs: Number(argOf('--otel-interval-ms') ?? 1000),
  openStreams: QUICK ? 200 : 1000,
  memoryRepeats: QUICK ? 1 : 3,
  /** The scrape phase's scales, in llm_ histogram series, and its scrapes at each. */
  seriesScales: QUICK ? [100, 1000] : [100, 1000, 10_000],
  scrapesAt: QUICK ? [20, 50] : [50, 200, 40],
  /** Room for the models the largest scale loads. */
  maxModels: 2000,
} as const

const METHOD = {
  paths:
    'direct: client to simulator; tcp-relay: bench/tcp-relay.ts, bytes copied between two sockets (the least any Node process in the path costs); node-relay: bench/node-relay.ts, node:http + undici, nothing measured; fastify-relay: the same behind one Fastify catch-all route set up as tokentap routes are (no body parsing, the reply hijacked): the targets’ reference; tokentap: parsing, token counting, metrics and a log line per request',
  added_ttft: 'client-side TTFT (request sent → first content event) of the path minus direct’s, one request at a time, paths interleaved; for the targets, per block of unloadedBlock rounds',
  gap_distortion: '|client gap − simulator send gap| per content event after the first (the simulator stamps tokentap_sent_ms)',
  inside: 'bench/el-probe.ts preloaded into every Node proxy: monitorEventLoopDelay (1 ms) and every GC pause over each load round',
  load_pairs: 'pairRounds rounds of tokentap and pairRounds + 1 of the Fastify relay, alternating, relay first and last; each tokentap round over the mean of the relay rounds before and after it',
  cpu: 'on-CPU time of all threads of the proxy (/proc/PID/task/*/schedstat; bench/proc.ts) over a round, divided by content chunks (saturation) or requests (short requests, after shortWarmUp uncounted ones)',
  memory:
    'median of memoryRepeats runs: VmRSS with openStreams streams open minus before, and heapUsed + external after a full GC with them open minus the same once they are gone, divided by the streams',
  scrape:
    'bench/scrape-phase.ts at seriesScales llm_ histogram series, scrapesAt scrapes at each, with the headers Prometheus sends (OpenMetrics first, gzip), timed to the whole body decompressed; protobuf too when served; first without traffic (proxy CPU per scrape), then with 10 streams keeping series changing (what the targets judge)',
  overhead:
    'tokentap’s llm_proxy_overhead_seconds{phase="first_chunk"} over the unloaded phase (p50 interpolated as histogram_quantile) beside the first chunk’s one-way delay p50 through tokentap minus direct, less the TCP relay’s own addition (one more loopback hop)',
  otel: 'per round two fresh tokentap processes, export off and on (OTLP/HTTP protobuf to a sink in the bench process), loaded at once; ratio on/off of CPU per request, median of the rounds',
  traces:
    'the OTel round with the "on" process exporting spans (otel.traces at its default sampling) instead of the metrics; both processes warmed after the first export (it makes V8 rebuild the byte path’s optimised code), and each round ends once a batch has gone out after its requests (its own spans exported within it)',
  verdict:
    'a row with rounds has one ratio or difference per round; its figure is the median; for a bound “≤ t” it is met when the upper quartile is ≤ t, not met when the lower quartile is > t, inconclusive otherwise (“≥ t” mirrored); quartiles as R type 7. A row with one figure is judged on it.',
}

// ---------------------------------------------------------------- processes

process.on('SIGINT', () => process.exit(130))
const t0 = performance.now()
const log = (s: string): void => void process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(0)}s] ${s}\n`)
let load: LoadClient
const job = <T>(j: Job): Promise<T> => load.job<T>(j)

/** A Node script of ours that prints its port (the simulator, a relay), stopped when the bench exits; `probe`: bench/el-probe.ts preloaded. */
async function listener(script: string[], args: string[], probe = false): Promise<{ pid: number; port: number; ask: Ask; kill(): void }> {
  const started = await startPortPrinter(join(DIST, ...script), args, probe ? join(DIST, 'bench', 'el-probe.js') : undefined)
  stopOnExit(started.proc)
  return { pid: pidOf(started.proc), port: started.port, ask: started.ask, kill: () => started.proc.kill('SIGKILL') }
}

async function tokentap(dir: string, simPort: number, flags: string[] = []): Promise<TokentapProcess> {
  // Its errors are shown (a failed scrape cuts the body short: the load client only sees "aborted").
  const onLine = (line: string): void => void (/"level":[56]0/.test(line) && process.stderr.write(`tokentap: ${line}\n`))
  const tt = await startTokentap(DIST, dir, simPort, { maxModels: P.maxModels, flags, onLine })
  stopOnExit(tt.proc)
  return tt
}

const relayArgs = (simPort: number, ...more: string[]): string[] => ['--upstream', `http://127.0.0.1:${simPort}`, ...more]
const chatUrl = (port: number, prefix = ''): string => `http://127.0.0.1:${port}${prefix}/v1/chat/completions`

// ---------------------------------------------------------------- phases shared by the full run and --only

/** CPU per short request (shortRounds rounds), after the uncounted warm-up. */
function shortRequests(urls: Record<string, Target>, pids: Record<string, number[]>): Promise<Record<string, SaturationFigures>> {
  log(`short requests: ${P.shortRounds} rounds of ${P.shortRequests} × ${P.shortChunks} content chunks, ${P.shortConcurrency} at a time`)
  const common = { job, urls, pids, plan: evenPlan(P.shortChunks, 0), streams: P.shortRequests, concurrency: P.shortConcurrency, idPrefix: 'short' }
  return saturationPhase({ ...common, rounds: P.shortRounds, warmUp: P.shortWarmUp })
}

const perRequestMs = (f: { cpuUs: number; requests: number }): number => f.cpuUs / f.requests / 1000

function otelRound(simPort: number, signal: 'metrics' | 'traces'): Promise<OtelPhaseResult> {
  log(`${signal === 'traces' ? 'traces' : 'OTel'} round: ${P.otelRounds} × ${P.otelRequests} requests through tokentap with the export off and on at once`)
  return otelPhase({
    job,
    dist: DIST,
    simPort,
    maxModels: 100,
    chunks: P.shortChunks,
    requests: P.otelRequests,
    concurrency: P.shortConcurrency,
    rounds: P.otelRounds,
    warmRequests: P.otelWarmRequests,
    intervalMs: P.otelIntervalMs,
    control: process.argv.includes('--otel-control'),
    signal,
    cpuProfDir: OTEL_PROF === undefined ? undefined : resolve(OTEL_PROF),
    traceGc: process.argv.includes('--otel-trace-gc'),
    log,
  })
}

function otelRow(list: ReturnType<typeof targetList>, r: OtelPhaseResult, signal: 'metrics' | 'traces'): void {
  const name =
    signal === 'metrics'
      ? `OTel export on (OTLP/HTTP protobuf every ${P.otelIntervalMs} ms): CPU per short request ≤ ${OTEL_RATIO_TARGET} × off`
      : `spans on (otel.traces at the default sampling): CPU per short request ≤ ${TRACES_RATIO_TARGET} × off`
  list.T(name, describeOtel(r), r.met)
}

/** The scrape phase at each of seriesScales llm_ histogram series, in both formats when tokentap serves protobuf. */
async function scrapes(tt: TokentapProcess): Promise<ScrapeFigures[]> {
  const streamUrl = chatUrl(tt.port, '/t')
  const deps = { job, ask: tt.ask, pid: pidOf(tt.proc), streamUrl, metricsUrl: `http://127.0.0.1:${tt.adminPort}/metrics`, accept: PROMETHEUS_ACCEPT, gzip: true, body: requestBody }
  const protobuf = await servesProtobuf(deps)
  log(`scrape: ${P.seriesScales.join(' → ')} llm_ histogram series, text${protobuf ? ' and protobuf' : ''}`)
  const out: ScrapeFigures[] = []
  for (let i = 0; i < P.seriesScales.length; i++) {
    out.push(await scrapeAtSeries(deps, P.seriesScales[i], P.scrapesAt[i], protobuf))
    log(`  ${describeScrape(out[i])}`)
  }
  return out
}

function emptyInputs(): TargetInputs {
  return { loadLevels: [], pair: {}, turns: {}, short: {}, addedBlocks: {}, satCpu: {}, held: {}, rss: {}, openStreams: P.openStreams, scales: [] }
}

/** Writes the result, prints the targets (and `before` them), exits (the children stop with the bench, stopOnExit). */
function finish(name: string, result: Record<string, unknown>, targets: readonly TargetRow[], floors: readonly TargetRow[], before = ''): never {
  const m = machine(LOAD_AT_START)
  const seconds = round((performance.now() - t0) / 1000, 0)
  mkdirSync(OUT_DIR, { recursive: true })
  const file = join(OUT_DIR, QUICK ? `quick.${name}.json` : `${name}.json`)
  writeFileSync(file, `${JSON.stringify({ date: new Date().toISOString(), quick: QUICK, machine: m, parameters: P, ...result, targets, floors, seconds }, null, 2)}\n`)
  let out = `${before}\ntargets (${m.cpu}, ${m.nproc} cores, node ${m.node}, load average ${m.loadavg_1m_at_start} → ${m.loadavg_1m_at_end}, ${seconds} s):\n`
  out += targets.map((t) => `${describeTarget(t)}\n`).join('')
  if (floors.length > 0) out += `\nfor information (a ratio is the first path over the second):\n${floors.map((t) => `  ${t.target}: ${t.value}\n`).join('')}`
  process.stdout.write(`${out}\nwrote ${file}\n`)
  process.exit(0)
}

// ---------------------------------------------------------------- --only

async function only(which: OnlyPhase, dir: string): Promise<void> {
  const sim = await listener(['src', 'sim', 'cli.js'], [])
  const list = targetList()
  const floors = targetList()
  const out: Record<string, unknown> = { only: which, method: { verdict: METHOD.verdict } }
  if (which === 'cpu-short') {
    const tt = await tokentap(dir, sim.port, CPU_PROF === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', resolve(CPU_PROF)])
    const relay = await listener(['bench', 'node-relay.js'], relayArgs(sim.port), true)
    const fastify = await listener(['bench', 'node-relay.js'], relayArgs(sim.port, '--fastify'), true)
    const urls = { tokentap: { url: chatUrl(tt.port, '/t') }, 'node-relay': { url: chatUrl(relay.port) }, 'fastify-relay': { url: chatUrl(fastify.port) } }
    const short = await shortRequests(urls, { tokentap: [pidOf(tt.proc)], 'node-relay': [relay.pid], 'fastify-relay': [fastify.pid] })
    out.short_requests = Object.fromEntries(Object.entries(short).map(([p, f]) => [p, { cpu_ms_per_request: round(perRequestMs(f), 3), rounds: f.rounds.map((r) => round(perRequestMs(r), 3)) }]))
    const inputs = { ...emptyInputs(), short: Object.fromEntries(Object.entries(short).map(([p, f]) => [p, f.rounds.map(perRequestMs)])) }
    shortTargets(inputs, list)
    floors.roundsRow(
      'the Fastify relay against the Node relay: CPU per short request',
      inputs.short['fastify-relay'].map((v, i) => v / inputs.short['node-relay'][i]),
      undefined,
    )
    relay.kill()
    fastify.kill()
    if (CPU_PROF !== undefined) {
      // A profile is written on a normal exit only: SIGTERM drains, then the process exits.
      const exited = new Promise((r) => tt.proc.once('exit', r))
      tt.proc.kill('SIGTERM')
      await exited
      log(`tokentap's CPU profile written to ${resolve(CPU_PROF)}`)
    } else tt.proc.kill('SIGKILL')
  }
  if (which === 'cpu-short' || which === 'otel' || which === 'traces') {
    const signal = which === 'traces' ? 'traces' : 'metrics'
    const r = await otelRound(sim.port, signal)
    out[signal === 'traces' ? 'traces_short_requests' : 'otel_short_requests'] = r
    otelRow(list, r, signal)
  }
  if (which === 'scrape') {
    const tt = await tokentap(dir, sim.port)
    await job(warmUpJob(chatUrl(tt.port, '/t'), 'warm'))
    out.scrape = await scrapes(tt)
    scrapeTargets({ ...emptyInputs(), scales: out.scrape as ScrapeFigures[] }, list)
  }
  rmSync(dir, { recursive: true, force: true })
  finish(which, out, list.targets, floors.targets)
}

// ---------------------------------------------------------------- the full run

async function fullRun(dir: string): Promise<void> {
  const sim = await listener(['src', 'sim', 'cli.js'], [])
  const tt = await tokentap(dir, sim.port)
  const tcp = await listener(['bench', 'tcp-relay.js'], relayArgs(sim.port), true)
  const relay = await listener(['bench', 'node-relay.js'], relayArgs(sim.port), true)
  const fastify = await listener(['bench', 'node-relay.js'], relayArgs(sim.port, '--fastify'), true)
  const targets: Record<string, Target> = {
    direct: { url: chatUrl(sim.port) },
    'tcp-relay': { url: chatUrl(tcp.port) },
    'node-relay': { url: chatUrl(relay.port) },
    'fastify-relay': { url: chatUrl(fastify.port) },
    tokentap: { url: chatUrl(tt.port, '/t') },
  }
  const paths = Object.keys(targets)
  const proxies = paths.filter((p) => p !== 'direct')
  const pids: Record<string, number[]> = { tokentap: [pidOf(tt.proc)], 'tcp-relay': [tcp.pid], 'node-relay': [relay.pid], 'fastify-relay': [fastify.pid] }
  const asks: Record<string, Ask> = { tokentap: tt.ask, 'tcp-relay': tcp.ask, 'node-relay': relay.ask, 'fastify-relay': fastify.ask }
  for (const p of paths) await job(warmUpJob(targets[p], `warm-${p}`))

  // Memory first, on processes that have not yet grown their heaps for the heavier phases.
  log(`memory: ${P.openStreams} open streams`)
  const inFlight = async (): Promise<number> => ((await (await fetch(`http://127.0.0.1:${tt.adminPort}/debug/streams`)).json()) as { in_flight: number }).in_flight
  const memory: Record<string, MemoryRuns> = {}
  for (const p of ['tokentap', 'node-relay', 'tcp-relay']) {
    memory[p] = await memoryPhase({ job, target: targets[p], pids: pids[p], ask: asks[p], inFlight: p === 'tokentap' ? inFlight : undefined }, P.openStreams, P.memoryRepeats)
    log(`  ${p}: RSS ${memory[p].rss.join(', ')} KiB/stream, heap+external ${memory[p].held.join(', ')} KiB/stream`)
  }

  log(`unloaded TTFT: ${P.unloadedRounds} rounds`)
  const unloaded = await unloadedPhase({ job, targets, metricsUrl: `http://127.0.0.1:${tt.adminPort}/metrics` }, P.unloadedRounds)
  const overhead = overheadFigures(unloaded)

  const loadDeps = { job, targets, asks }
  const load: Record<number, Record<string, LoadFigures>> = {}
  const inputsTurns: Record<number, Record<string, LoadFigures['rounds']>> = {}
  const pair: Record<number, TargetInputs['pair'][number]> = {}
  for (const n of P.loadLevels) {
    log(`load: ${n} streams × ${P.loadChunks} chunks ${P.loadGapMs} ms apart, every path, ${P.loadRounds} rounds; then ${P.pairRounds} paired rounds`)
    const acc = await turnRounds(loadDeps, n, P.loadRounds)
    load[n] = Object.fromEntries(paths.map((p) => [p, loadFigures(acc[p])]))
    inputsTurns[n] = Object.fromEntries(paths.map((p) => [p, acc[p].rounds]))
    const pr = await pairedRounds(loadDeps, n, P.pairRounds, 'fastify-relay', 'tokentap')
    pair[n] = { tokentap: pr.subject.rounds, relay: pr.relay.rounds }
  }

  log(`saturation: ${P.satStreams} streams × ${P.satChunks} chunks, no gaps, ${P.satConcurrency} at a time, ${P.satRounds} rounds`)
  const sat = await saturationPhase({ job, urls: targets, pids, plan: evenPlan(P.satChunks, 0), streams: P.satStreams, concurrency: P.satConcurrency, rounds: P.satRounds })
  const short = await shortRequests(Object.fromEntries(proxies.map((p) => [p, targets[p]])), pids)
  const otel = await otelRound(sim.port, 'metrics')
  log(`  ${describeOtel(otel)}`)
  // The relays are done: /metrics at its scales on tokentap alone.
  for (const p of [tcp, relay, fastify]) p.kill()
  const scales = await scrapes(tt)

  const perChunk = (f: { cpuUs: number; chunks: number }): number => f.cpuUs / f.chunks
  const ttft = (p: string): ReturnType<typeof summary> => summary(unloaded.ttft[p])
  const addedBlocks = (p: string): number[] => {
    const ref = blockP50(unloaded.ttft.direct, P.unloadedBlock)
    return blockP50(unloaded.ttft[p], P.unloadedBlock).map((v, i) => v - ref[i])
  }
  const inputs: TargetInputs = {
    loadLevels: P.loadLevels,
    pair,
    turns: inputsTurns,
    short: Object.fromEntries(proxies.map((p) => [p, short[p].rounds.map(perRequestMs)])),
    addedBlocks: Object.fromEntries(proxies.map((p) => [p, addedBlocks(p)])),
    satCpu: Object.fromEntries(proxies.map((p) => [p, sat[p].rounds.map(perChunk)])),
    held: Object.fromEntries(Object.entries(memory).map(([p, m]) => [p, m.held])),
    rss: Object.fromEntries(Object.entries(memory).map(([p, m]) => [p, m.rss])),
    openStreams: P.openStreams,
    scales,
  }
  const list = targetList()
  issueTargets(inputs, list)
  otelRow(list, otel, 'metrics')
  list.T(
    'llm_proxy_overhead_seconds{phase="first_chunk"} p50 within 0.1 ms of the client-side added latency of the first chunk (unloaded; beyond one TCP hop)',
    overhead.p50_ms === null ? 'n/a (metric absent)' : `${overhead.p50_ms} ms vs ${overhead.client_added_beyond_hop_p50_ms} ms (${overhead.requests} requests)`,
    overhead.difference_ms === null ? null : Math.abs(overhead.difference_ms) <= 0.1,
  )
  const floors = targetList()
  floorRows(inputs, floors)
  const result = {
    method: METHOD,
    unloaded_ttft_ms: Object.fromEntries(paths.map((p) => [p, pick(ttft(p))])),
    added_ttft_ms: Object.fromEntries(
      proxies.map((p) => [p, { p50: round(ttft(p).p50 - ttft('direct').p50), p99: round(ttft(p).p99 - ttft('direct').p99), blocks_p50: addedBlocks(p).map((v) => round(v)) }]),
    ),
    load,
    load_pairs: pair,
    saturation: Object.fromEntries(
      paths.map((p) => [
        p,
        {
          chunks_per_s: round(sat[p].chunks / sat[p].seconds, 0),
          cpu_us_per_chunk: p === 'direct' ? null : round(perChunk(sat[p]), 3),
          rounds: sat[p].rounds.map((r) => round(r.chunks / r.seconds, 0)),
        },
      ]),
    ),
    short_requests: Object.fromEntries(proxies.map((p) => [p, { cpu_ms_per_request: round(perRequestMs(short[p]), 3), rounds: short[p].rounds.map((r) => round(perRequestMs(r), 3)) }])),
    otel_short_requests: otel,
    memory,
    overhead,
    scrape: scales,
  }
  // One table: a row a measure, a column a path.
  const rows: string[][] = [['metric', ...paths]]
  const line = (name: string, f: (p: string) => number | string | null | undefined): void => void rows.push([name, ...paths.map((p) => String(f(p) ?? '–').replace(/^NaN$/, '–'))])
  line('unloaded TTFT p50 (ms)', (p) => result.unloaded_ttft_ms[p].p50)
  line('added TTFT p50 (ms)', (p) => result.added_ttft_ms[p]?.p50)
  for (const n of P.loadLevels) {
    line(`${n} streams: TTFT p99 (ms)`, (p) => load[n][p].ttft.p99)
    line(`${n} streams: gap distortion p99 (ms)`, (p) => load[n][p].gap_distortion.p99)
    line(`${n} streams: event-loop delay p99 (ms)`, (p) => load[n][p].inside?.event_loop_delay_p99_ms)
    line(`${n} streams: GC pauses n / total ms`, (p) => (load[n][p].inside === null ? null : `${load[n][p].inside?.gc_count} / ${load[n][p].inside?.gc_ms}`))
  }
  line('saturation: chunks/s', (p) => result.saturation[p].chunks_per_s)
  line('saturation: CPU µs/chunk', (p) => result.saturation[p].cpu_us_per_chunk)
  line('short request: CPU ms/request', (p) => result.short_requests[p]?.cpu_ms_per_request)
  line('RSS per open stream (KiB, median)', (p) => (memory[p] === undefined ? null : summary(memory[p].rss).p50))
  line('heap+external per open stream (KiB, median)', (p) => (memory[p] === undefined ? null : summary(memory[p].held).p50))
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)))
  let table = `\n${rows.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ')).join('\n')}\n\n`
  table += scales.map((s) => `scrape: ${describeScrape(s)}\n`).join('')
  table += `${overhead.metric} p50 (unloaded): ${overhead.p50_ms ?? 'n/a'} ms; client side ${overhead.client_added_first_chunk_p50_ms} ms over direct, ${overhead.client_added_beyond_hop_p50_ms} ms beyond the TCP relay's ${overhead.hop_first_chunk_p50_ms} ms\n`
  rmSync(dir, { recursive: true, force: true })
  finish('latest', result, list.targets, floors.targets, table)
}

const dir = mkdtempSync(join(tmpdir(), 'tokentap-bench-'))
load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
stopOnExit(load.proc)
await (ONLY === undefined ? fullRun(dir) : only(ONLY as OnlyPhase, dir)).catch((err: unknown) => {
  process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
