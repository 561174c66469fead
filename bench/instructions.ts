import { execFile } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { mkdirSync, readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import type { Job } from './load-client.ts'
import { evenPlan, request } from './plans.ts'
import { pidOf, startPortPrinter, startTokentap, stopOnExit } from './proc.ts'
import { round } from './stats.ts'

/**
 * Instruction counts per short request, tokentap against the Fastify relay (issue 29: a measure
 * that does not flip). The CPU time of a round moves with whatever else the machine runs; the
 * instructions a process executes for the same requests do not. Both proxies run under
 * `valgrind --tool=callgrind --instr-atstart=no` (valgrind serialises a process's threads and
 * counts all of them: V8's compiler and GC threads are in the figure, as in the schedstat CPU):
 * 1. warm-up uncounted, with instrumentation off (valgrind's core only, several times faster
 *    than with callgrind's), so V8 reaches the same steady state the CPU rounds measure;
 * 2. `callgrind_control -i on` then `-z` (counters zeroed), the counted requests, a pause for the
 *    end-of-request work after the last byte (as the CPU window), then `callgrind_control -d`:
 *    the dump's `totals:` line is the instructions (Ir) of exactly that window.
 * Both proxies are loaded at once (two single-threaded valgrind processes on two cores): the
 * counts do not depend on the timing, and the phase takes half the time.
 */

const run = promisify(execFile)

export interface InstructionOptions {
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
}

export interface InstructionFigures {
  readonly requests: number
  readonly warm_up: number
  /** Instructions (Ir) per request of each path over the counted window. */
  readonly per_request: Record<string, number>
  readonly totals: Record<string, number>
  /** tokentap over the Fastify relay. */
  readonly ratio: number
  readonly seconds: number
}

/** Whether valgrind can be run here (the phase is skipped with a hint otherwise). */
export async function haveValgrind(): Promise<boolean> {
  try {
    await run('valgrind', ['--version'])
    await run('callgrind_control', ['-h'])
    return true
  } catch {
    return false
  }
}

export const VALGRIND_HINT = 'valgrind not found (apt-get install -y valgrind): skipping the instruction counts'

/** The `totals:` (or `summary:`) line of a callgrind dump: instructions executed. */
function totalsOf(file: string): number {
  const text = readFileSync(file, 'utf8')
  const m = /^totals:\s+(\d+)/m.exec(text) ?? /^summary:\s+(\d+)/m.exec(text)
  if (m === null) throw new Error(`no totals in ${file}`)
  return Number(m[1])
}

export async function instructionsPhase(o: InstructionOptions): Promise<InstructionFigures> {
  const t0 = performance.now()
  mkdirSync(o.dir, { recursive: true })
  const wrap = (name: string): string[] => ['valgrind', '--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${join(o.dir, `${name}.%p`)}`, `--log-file=${join(o.dir, `${name}.%p.log`)}`]
  const probe = join(o.dist, 'bench', 'el-probe.js')
  const upstream = `http://127.0.0.1:${o.simPort}`
  // Started one after the other: start-up under valgrind is CPU-bound for seconds.
  const tt = await startTokentap(o.dist, o.dir, o.simPort, { maxModels: 100, wrap: wrap('tokentap') })
  stopOnExit(tt.proc)
  const relay = await startPortPrinter(join(o.dist, 'bench', 'node-relay.js'), ['--upstream', upstream, '--fastify'], probe, wrap('fastify-relay'))
  stopOnExit(relay.proc)
  const paths: Record<string, { url: string; proc: ChildProcess }> = {
    tokentap: { url: `http://127.0.0.1:${tt.port}/t/v1/chat/completions`, proc: tt.proc },
    'fastify-relay': { url: `http://127.0.0.1:${relay.port}/v1/chat/completions`, proc: relay.proc },
  }
  const plan = evenPlan(o.chunks, 0)
  const streams = (p: string, count: number, id: string): Job => ({ kind: 'streams', ...request(paths[p].url, plan), count, concurrency: o.concurrency, phaseMs: 0, idPrefix: id, detail: false })
  const control = (p: string, ...args: string[]): Promise<unknown> => run('callgrind_control', [...args, String(pidOf(paths[p].proc))])
  const names = Object.keys(paths)
  const totals: Record<string, number> = {}
  try {
    o.log?.(`instructions: ${o.warmUp} uncounted short requests through each proxy under valgrind, then ${o.requests} counted under callgrind`)
    await Promise.all(names.map((p) => o.job(streams(p, o.warmUp, `ir-warm-${p}`))))
    await Promise.all(
      names.map(async (p) => {
        await control(p, '-i', 'on')
        await control(p, '-z')
        await o.job(streams(p, o.requests, `ir-${p}`))
        // End-of-request work runs after the last byte (one turn of the loop; slower under valgrind).
        await new Promise((r) => setTimeout(r, 500))
        const pid = pidOf(paths[p].proc)
        const before = new Set(readdirSync(o.dir))
        await control(p, '-d')
        const dump = readdirSync(o.dir).find((f) => !before.has(f) && f.startsWith(`${p}.${pid}.`) && !f.endsWith('.log'))
        if (dump === undefined) throw new Error(`callgrind wrote no dump for ${p}`)
        totals[p] = totalsOf(join(o.dir, dump))
      }),
    )
  } finally {
    for (const p of names) paths[p].proc.kill('SIGKILL')
  }
  const perRequest = Object.fromEntries(names.map((p) => [p, Math.round(totals[p] / o.requests)]))
  return {
    requests: o.requests,
    warm_up: o.warmUp,
    per_request: perRequest,
    totals,
    ratio: round(totals.tokentap / totals['fastify-relay'], 3),
    seconds: round((performance.now() - t0) / 1000, 0),
  }
}

/** One line for the report. */
export function describeInstructions(f: InstructionFigures): string {
  return `tokentap ${f.per_request.tokentap.toLocaleString('en')} instructions a request, the Fastify relay ${f.per_request['fastify-relay'].toLocaleString('en')}: ${f.ratio}× (${f.requests} counted requests after ${f.warm_up} uncounted, ${f.seconds} s)`
}
