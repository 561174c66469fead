import { execFile } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { basename, dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import type { Job } from '../load-client.ts'
import { SHORT_CHUNKS, SHORT_CONCURRENCY, evenPlan, request } from '../plans.ts'
import { machine, pidOf, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from '../proc.ts'
import { round } from '../stats.ts'
import { describeTarget, targetList } from '../verdict.ts'

/**
 * `npm run bench:lab -- instructions [--quick] [--callgrind-dir DIR] [--chunks N] [--base DIST]… [--node-flag F]…` (valgrind needed): writes
 * bench/results/instructions.json with the target "CPU per short request ≤ 1.3 × the Fastify
 * relay's" judged on the instructions outside V8's compilers; `--callgrind-dir DIR` keeps
 * callgrind's dumps there (`callgrind_annotate DIR/tokentap.PID.1` shows where they go).
 * `--chunks N` streams N content chunks a request instead of the short request's 3 (two runs
 * give the cost a request and the cost a chunk); each `--base DIST` counts one more path in the
 * same window, `tokentap@TREE`: the server of another build (TREE/dist, e.g. an older commit's
 * `git worktree`, built), for a before/after of a change; each `--node-flag F` goes to every
 * tokentap process (`--node-flag --perf-basic-prof`: /tmp/perf-PID.map names the JIT code the
 * dumps show as bare addresses; V8 also leaves an isolate-*-v8.log in the working directory);
 * `--base-traces R` runs the bases with spans on at ratio R (a before/after of a change to spans);
 * each `--traces R` counts one more path, `tokentap+traces@R`: this build with spans on
 * (`otel.traces`, `sample.ratio` R) exported to a sink in this process, for what spans cost in
 * instructions (issue 38); `--requests N` and `--warm-up N` change the window and the warm-up.
 * Each path's main thread is also counted apart (callgrind's `--separate-threads`): the rest is
 * V8's compiler and GC helpers, libuv's pool and the span export's thread.
 * Instruction counts per short request, tokentap against the Fastify relay (issue 29: a measure
 * that does not flip). The CPU time of a round moves with whatever else the machine runs; the
 * instructions a process executes for the same requests do not. Both proxies run under
 * `valgrind --tool=callgrind --instr-atstart=no` (valgrind serialises a process's threads and
 * counts all of them: V8's compiler and GC threads are in the figure, as in the schedstat CPU):
 * 1. warm-up uncounted, with instrumentation off (valgrind's core only, several times faster
 *    than with callgrind's), so V8 reaches the same steady state the CPU rounds measure;
 * 2. 3 s idle (V8's compiler threads finish what the warm-up queued), `callgrind_control -i on`
 *    then `-z` (counters zeroed), the counted requests, a pause for the end-of-request work after
 *    the last byte (as the CPU window), then `callgrind_control -d`: the dump holds the
 *    instructions (Ir) of exactly that window, by function.
 * The dump is split by function name into V8's compilers, its GC and the rest: windows of one
 * process after the same warm-up spent 3–56 % of their instructions compiling (V8 tiers code up
 * on background threads, and when a job lands is not fixed), so the ratio without the compilers
 * is the steady one, and the verdict's; the whole is reported beside it.
 * Both proxies are loaded at once (two single-threaded valgrind processes on two cores): the
 * counts do not depend on the timing, and the phase takes half the time.
 */

const run = promisify(execFile)

interface InstructionOptions {
  job<T>(job: Job): Promise<T>
  readonly dist: string
  /** Where callgrind writes its dumps and logs. */
  readonly dir: string
  readonly simPort: number
  readonly requests: number
  readonly warmUp: number
  readonly chunks: number
  readonly concurrency: number
  readonly log?: (line: string) => void
  /** Other builds' dist/ folders, each counted as `tokentap@` and its tree's folder name. */
  readonly bases?: readonly string[]
  /** Node flags for every tokentap process (e.g. --perf-basic-prof, to name JIT code in the dumps). */
  readonly nodeFlags?: readonly string[]
  /** Sampling ratios: one more path each, this build with spans on, exported to `tracesEndpoint`. */
  readonly traces?: readonly number[]
  readonly tracesEndpoint?: string
  /** The bases' spans: on at this ratio (a before/after of a change to spans), else off. */
  readonly baseTraces?: number
}

interface InstructionFigures {
  readonly requests: number
  readonly warm_up: number
  /** Instructions (Ir, all threads) per request of each path over the counted window. */
  readonly per_request: Record<string, number>
  /** The same without V8's compilers (what the requests cost once compiled). */
  readonly steady_per_request: Record<string, number>
  readonly compiler_per_request: Record<string, number>
  readonly gc_per_request: Record<string, number>
  /** The main thread's instructions per request, and those outside V8's compilers and GC. */
  readonly main_per_request: Record<string, number>
  readonly main_steady_per_request: Record<string, number>
  /** tokentap over the Fastify relay: all instructions, and without the compilers. */
  readonly ratio: number
  readonly steady_ratio: number
  readonly seconds: number
}

/** Whether valgrind can be run here (the phase is skipped with a hint otherwise). */
async function haveValgrind(): Promise<boolean> {
  try {
    await run('valgrind', ['--version'])
    await run('callgrind_control', ['-h'])
    return true
  } catch {
    return false
  }
}

const VALGRIND_HINT = 'valgrind not found (apt-get install -y valgrind): skipping the instruction counts'

async function instructionsPhase(o: InstructionOptions): Promise<InstructionFigures> {
  const t0 = performance.now()
  mkdirSync(o.dir, { recursive: true })
  const wrap = (name: string): string[] => [
    'valgrind',
    '--tool=callgrind',
    '--instr-atstart=no',
    '--separate-threads=yes',
    `--callgrind-out-file=${join(o.dir, `${name}.%p`)}`,
    `--log-file=${join(o.dir, `${name}.%p.log`)}`,
  ]
  const probe = join(o.dist, 'bench', 'el-probe.js')
  const upstream = `http://127.0.0.1:${o.simPort}`
  // Started one after the other: start-up under valgrind is CPU-bound for seconds.
  const tt = await startTokentap(o.dist, o.dir, o.simPort, { maxModels: 100, wrap: wrap('tokentap'), flags: o.nodeFlags })
  stopOnExit(tt.proc)
  const relay = await startPortPrinter(join(o.dist, 'bench', 'node-relay.js'), ['--upstream', upstream, '--fastify'], probe, wrap('fastify-relay'))
  stopOnExit(relay.proc)
  const paths: Record<string, { url: string; proc: ChildProcess }> = {
    tokentap: { url: `http://127.0.0.1:${tt.port}/t/v1/chat/completions`, proc: tt.proc },
    'fastify-relay': { url: `http://127.0.0.1:${relay.port}/v1/chat/completions`, proc: relay.proc },
  }
  for (const dist of o.bases ?? []) {
    const name = `tokentap@${basename(dirname(dist))}${o.baseTraces === undefined ? '' : `+traces@${o.baseTraces}`}`
    const baseDir = join(o.dir, name)
    mkdirSync(baseDir, { recursive: true })
    // The label-set budget's key is left out: an older build's schema may not know it (the bench has one model).
    const traces = o.baseTraces === undefined ? undefined : { endpoint: o.tracesEndpoint ?? '', ratio: o.baseTraces }
    const base = await startTokentap(o.dist, baseDir, o.simPort, { maxModels: 100, wrap: wrap(name), serverDist: dist, noLabelSetBudget: true, flags: o.nodeFlags, traces })
    stopOnExit(base.proc)
    paths[name] = { url: `http://127.0.0.1:${base.port}/t/v1/chat/completions`, proc: base.proc }
  }
  for (const ratio of o.traces ?? []) {
    const name = `tokentap+traces@${ratio}`
    const tracedDir = join(o.dir, name)
    mkdirSync(tracedDir, { recursive: true })
    const traced = await startTokentap(o.dist, tracedDir, o.simPort, { maxModels: 100, wrap: wrap(name), flags: o.nodeFlags, traces: { endpoint: o.tracesEndpoint ?? '', ratio } })
    stopOnExit(traced.proc)
    paths[name] = { url: `http://127.0.0.1:${traced.port}/t/v1/chat/completions`, proc: traced.proc }
  }
  const plan = evenPlan(o.chunks, 0)
  const streams = (p: string, count: number, id: string): Job => ({ kind: 'streams', ...request(paths[p].url, plan), count, concurrency: o.concurrency, phaseMs: 0, idPrefix: id, detail: false })
  const control = (p: string, ...args: string[]): Promise<unknown> => run('callgrind_control', [...args, String(pidOf(paths[p].proc))])
  const names = Object.keys(paths)
  const split: Record<string, Split> = {}
  const mainSplit: Record<string, Split> = {}
  try {
    o.log?.(`instructions: ${o.warmUp} uncounted short requests through each proxy under valgrind, then ${o.requests} counted under callgrind`)
    await Promise.all(names.map((p) => o.job(streams(p, o.warmUp, `ir-warm-${p}`))))
    await Promise.all(
      names.map(async (p) => {
        // Settle: V8 finishes the compile jobs the warm-up queued while the process is idle. (No
        // forced collection here: a full GC ages code, and the window then recompiled what it flushed.)
        await new Promise((r) => setTimeout(r, 3000))
        await control(p, '-i', 'on')
        await control(p, '-z')
        await o.job(streams(p, o.requests, `ir-${p}`))
        // End-of-request work runs after the last byte (one turn of the loop; slower under valgrind).
        await new Promise((r) => setTimeout(r, 500))
        const pid = pidOf(paths[p].proc)
        const before = new Set(readdirSync(o.dir))
        await control(p, '-d')
        // One dump per thread (`…-01` is the main one); a thread that ended in the window has none.
        const dumps = readdirSync(o.dir).filter((f) => !before.has(f) && f.startsWith(`${p}.${pid}.`) && !f.endsWith('.log'))
        if (dumps.length === 0) throw new Error(`callgrind wrote no dump for ${p}`)
        const byThread = dumps.map((f) => ({ main: f.endsWith('-01'), split: splitDump(readFileSync(join(o.dir, f), 'utf8')) }))
        split[p] = sumSplits(byThread.map((t) => t.split))
        mainSplit[p] = sumSplits(byThread.filter((t) => t.main).map((t) => t.split))
      }),
    )
  } finally {
    for (const p of names) paths[p].proc.kill('SIGKILL')
  }
  const per = (f: (x: Split) => number): Record<string, number> => Object.fromEntries(names.map((p) => [p, Math.round(f(split[p]) / o.requests)]))
  const steady = (x: Split): number => x.total - x.compiler
  return {
    requests: o.requests,
    warm_up: o.warmUp,
    per_request: per((x) => x.total),
    steady_per_request: per(steady),
    compiler_per_request: per((x) => x.compiler),
    gc_per_request: per((x) => x.gc),
    main_per_request: Object.fromEntries(names.map((p) => [p, Math.round(mainSplit[p].total / o.requests)])),
    main_steady_per_request: Object.fromEntries(names.map((p) => [p, Math.round((mainSplit[p].total - mainSplit[p].compiler - mainSplit[p].gc) / o.requests)])),
    ratio: round(split.tokentap.total / split['fastify-relay'].total, 3),
    steady_ratio: round(steady(split.tokentap) / steady(split['fastify-relay']), 3),
    seconds: round((performance.now() - t0) / 1000, 0),
  }
}

/** A window's instructions: all of them, and those in V8's compilers and in its garbage collector. */
interface Split {
  readonly total: number
  readonly compiler: number
  readonly gc: number
}

const sumSplits = (xs: readonly Split[]): Split => ({
  total: xs.reduce((a, x) => a + x.total, 0),
  compiler: xs.reduce((a, x) => a + x.compiler, 0),
  gc: xs.reduce((a, x) => a + x.gc, 0),
})

/** V8's compilers (TurboFan, Maglev, Sparkplug, the parser and bytecode generator) by C++ function name. */
const COMPILER =
  /v8::internal::(compiler|maglev|baseline|interpreter|parsing|turboshaft)::|v8::internal::(Parser|Scanner|Compiler|BytecodeGenerator|Zone|OptimizedCompilationJob|ParseInfo|PreParser|AstValueFactory|DeclarationScope|Scope)\b|Builtins_CompileLazy/
/** V8's garbage collector (young and old generation, concurrent marking, sweeping) by C++ function name. */
const GC =
  /v8::internal::(Scavenger|ScavengeVisitor|ScavengerCollector|RootScavengeVisitor|IterateAndScavengePromotedObjectsVisitor|MarkCompactCollector|MinorMarkCompactCollector|MarkingVisitor|MainMarkingVisitor|ConcurrentMarking|IncrementalMarking|MarkingWorklists|Sweeper|Evacuat\w*|RecordMigratedSlotVisitor|Heap|GCTracer|PretenuringHandler|BodyDescriptorBase|MemoryChunk|PagedSpace|SemiSpace|NewSpace|RememberedSet\w*|SlotSet|TypedSlotSet|LocalHeap|HeapObjectIterator)\b|heap::base::|IterateObjectCache|cppgc::/

/**
 * Self cost by function of a callgrind dump (one event, Ir), summed into compiler, GC and the
 * whole. The format: `fn=(id) name` opens a function (names are given once, by `fn=` or `cfn=`,
 * and later by id alone); a cost line is a position and the cost; the line after `calls=` is
 * the inclusive cost of that call, already counted in the callee's own lines.
 */
function splitDump(text: string): Split {
  const names = new Map<string, string>()
  const nameOf = (ref: string): string => {
    const m = /^\((\d+)\)(?: (.*))?$/.exec(ref)
    if (m === null) return ref
    if (m[2] !== undefined) names.set(m[1], m[2])
    return names.get(m[1]) ?? ref
  }
  let kind: 'compiler' | 'gc' | 'other' = 'other'
  let skip = false
  const sum = { total: 0, compiler: 0, gc: 0 }
  for (const line of text.split('\n')) {
    if (skip) {
      skip = false
      continue
    }
    const c = line.charCodeAt(0)
    if ((c >= 48 && c <= 57) || c === 43 || c === 45 || c === 42) {
      const sp = line.indexOf(' ')
      if (sp < 0) continue
      const ir = Number(line.slice(sp + 1))
      if (!Number.isFinite(ir)) continue
      sum.total += ir
      if (kind !== 'other') sum[kind] += ir
    } else if (line.startsWith('fn=')) {
      const name = nameOf(line.slice(3))
      kind = COMPILER.test(name) ? 'compiler' : GC.test(name) ? 'gc' : 'other'
    } else if (line.startsWith('cfn=')) nameOf(line.slice(4))
    else if (line.startsWith('calls=')) skip = true
  }
  return sum
}

/** One line for the report. */
function describeInstructions(f: InstructionFigures): string {
  const one = (p: string): string =>
    `${p} ${f.per_request[p].toLocaleString('en')} (compilers ${f.compiler_per_request[p].toLocaleString('en')}, GC ${f.gc_per_request[p].toLocaleString('en')}; main thread ${f.main_per_request[p].toLocaleString('en')}, ${f.main_steady_per_request[p].toLocaleString('en')} outside compilers and GC)`
  return `instructions a request: ${Object.keys(f.per_request).map(one).join(', ')}: ${f.ratio}×, ${f.steady_ratio}× without the compilers (${f.requests} counted requests after ${f.warm_up} uncounted, ${f.seconds} s)`
}

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
const QUICK = process.argv.includes('--quick')
const LOAD_AT_START = loadavg()[0]
const CPU_SHORT_BOUND = 1.3
if (!(await haveValgrind())) {
  process.stderr.write(`${VALGRIND_HINT}\n`)
  process.exit(1)
}
const dirArg = process.argv.indexOf('--callgrind-dir')
const chunksArg = process.argv.indexOf('--chunks')
const bases = process.argv.flatMap((a, i) => (a === '--base' ? [resolve(process.argv[i + 1])] : []))
const traces = process.argv.flatMap((a, i) => (a === '--traces' ? [Number(process.argv[i + 1])] : []))
const numberArg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(name)
  return i < 0 ? dflt : Number(process.argv[i + 1])
}
// Spans go to a sink here that accepts every export (an empty ExportTraceServiceResponse).
const sink = createServer((req, res) => {
  req.resume()
  req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': '0' }).end())
})
await new Promise<void>((r) => sink.listen(0, '127.0.0.1', r))
sink.unref()
const work = mkdtempSync(join(tmpdir(), 'tokentap-instructions-'))
const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
stopOnExit(load.proc)
const sim = await startPortPrinter(join(DIST, 'src', 'sim', 'cli.js'), [])
stopOnExit(sim.proc)
const f = await instructionsPhase({
  job: (j) => load.job(j),
  dist: DIST,
  dir: dirArg < 0 ? join(work, 'callgrind') : resolve(process.argv[dirArg + 1]),
  simPort: sim.port,
  requests: numberArg('--requests', QUICK ? 200 : 2000),
  warmUp: numberArg('--warm-up', QUICK ? 300 : 5000),
  traces,
  baseTraces: process.argv.includes('--base-traces') ? numberArg('--base-traces', 0.1) : undefined,
  tracesEndpoint: `http://127.0.0.1:${(sink.address() as AddressInfo).port}/v1/traces`,
  chunks: chunksArg < 0 ? SHORT_CHUNKS : Number(process.argv[chunksArg + 1]),
  concurrency: SHORT_CONCURRENCY,
  bases,
  nodeFlags: process.argv.flatMap((a, i) => (a === '--node-flag' ? [process.argv[i + 1]] : [])),
  log: (line) => process.stderr.write(`[instructions] ${line}\n`),
})
const list = targetList()
const n = (p: string): string => f.steady_per_request[p].toLocaleString('en')
list.T(
  `CPU per short request ≤ ${CPU_SHORT_BOUND} × the Fastify relay's (instructions outside V8's compilers, callgrind)`,
  `${f.steady_ratio}× (${n('tokentap')} vs ${n('fastify-relay')} instructions a request over ${f.requests} requests; with the compilers ${f.ratio}×)`,
  f.steady_ratio <= CPU_SHORT_BOUND,
)
const file = join(DIST, '..', 'bench', 'results', QUICK ? 'quick.instructions.json' : 'instructions.json')
writeFileSync(file, `${JSON.stringify({ date: new Date().toISOString(), quick: QUICK, machine: machine(LOAD_AT_START), instructions: f, targets: list.targets }, null, 2)}\n`)
process.stdout.write(`${describeInstructions(f)}\n${list.targets.map((t) => `${describeTarget(t)}\n`).join('')}wrote ${file}\n`)
process.exit(0)
