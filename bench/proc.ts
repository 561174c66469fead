import { fork, spawn, type ChildProcess } from 'node:child_process'
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { createServer, type AddressInfo } from 'node:net'
import { cpus, loadavg } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import type { Readable } from 'node:stream'
import type { Job } from './load-client.ts'

/** The benchmark's processes: CPU time and RSS from /proc, free ports, starting its Node processes. */

const read = (file: string): string | undefined => {
  try {
    return readFileSync(file, 'utf8')
  } catch {
    return undefined // gone, or not Linux
  }
}

/**
 * CPU time of one process, µs, all its threads: each thread's on-CPU nanoseconds in
 * /proc/PID/task/TID/schedstat, else utime + stime from /proc/PID/stat. Those count 10 ms ticks:
 * one tick either way moved a 600-request round by 11 %, more than the margins the targets judge.
 */
function processCpuMicros(pid: number): number {
  try {
    let ns = 0
    for (const tid of readdirSync(`/proc/${pid}/task`)) ns += Number(read(`/proc/${pid}/task/${tid}/schedstat`)?.split(' ')[0])
    if (Number.isFinite(ns)) return ns / 1000
  } catch {
    // no such process
  }
  const stat = read(`/proc/${pid}/stat`)
  // The fields after the command name, which may hold spaces.
  const f = stat?.slice(stat.lastIndexOf(')') + 2).split(' ')
  return f === undefined ? 0 : (Number(f[11]) + Number(f[12])) * 10_000
}

/** A process's main thread's CPU time, µs (/proc/PID/task/PID/schedstat; 0 when gone): beside `cpuMicros`, what the other threads spent. */
export function mainThreadCpuMicros(pid: number): number {
  const ns = Number(read(`/proc/${pid}/task/${pid}/schedstat`)?.split(' ')[0])
  return Number.isFinite(ns) ? ns / 1000 : 0
}

/** CPU time of the processes, µs. */
export const cpuMicros = (pids: readonly number[]): number => pids.reduce((us, pid) => us + processCpuMicros(pid), 0)

/** Resident set size of the processes, bytes. */
export const rssBytes = (pids: readonly number[]): number => pids.reduce((b, pid) => b + 1024 * Number(/VmRSS:\s+(\d+) kB/.exec(read(`/proc/${pid}/status`) ?? '')?.[1] ?? 0), 0)

/** A child's pid (undefined only when the spawn failed: there is nothing to measure then). */
export function pidOf(proc: ChildProcess): number {
  if (proc.pid === undefined) throw new Error(`${proc.spawnfile} did not start`)
  return proc.pid
}

export function piped(stream: Readable | null, what: string): Readable {
  if (stream === null) throw new Error(`${what} is not a pipe`)
  return stream
}

/** Sends `{cmd}` to a child over IPC; resolves with the first message whose `cmd` is `reply` (the el-probe's answers). */
export function askChild(child: ChildProcess, cmd: string, reply: string): Promise<Record<string, number>> {
  return new Promise((resolve) => {
    const on = (m: { cmd?: string }): void => {
      if (m.cmd !== reply) return
      child.off('message', on)
      resolve(m as Record<string, number>)
    }
    child.on('message', on)
    child.send({ cmd })
  })
}

/** Node with `args`, under `wrap` when given (a tool that runs the rest of its command line: `valgrind … node …`). */
const wrapped = (wrap: readonly string[], args: readonly string[]): [string, string[]] => (wrap.length === 0 ? [process.execPath, [...args]] : [wrap[0], [...wrap.slice(1), process.execPath, ...args]])

/**
 * Starts a Node script of ours that prints `{"port":N}` once listening on a free port. With
 * `probe` (bench/el-probe.js) it runs under --expose-gc with the probe preloaded and an IPC channel.
 */
export async function startPortPrinter(script: string, args: readonly string[], probe?: string, wrap: readonly string[] = []) {
  const pre = probe === undefined ? [] : ['--expose-gc', '--import', probe]
  const [cmd, argv] = wrapped(wrap, [...pre, script, '--port', '0', ...args])
  const proc = spawn(cmd, argv, { stdio: probe === undefined ? ['ignore', 'pipe', 'inherit'] : ['ignore', 'pipe', 'inherit', 'ipc'] })
  const line = await new Promise<string>((res) => createInterface({ input: piped(proc.stdout, 'stdout') }).once('line', res))
  return { proc, port: (JSON.parse(line) as { port: number }).port, ask: (cmd: string, reply: string) => askChild(proc, cmd, reply) }
}

/** A free TCP port on 127.0.0.1 (for the proxies' configs). */
export function freePort(): Promise<number> {
  return new Promise((res) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as AddressInfo).port
      s.close(() => res(port))
    })
  })
}

/** The load generator (bench/load-client.ts) in its own process, and the call that runs a job in it. */
export type LoadClient = ReturnType<typeof startLoadClient>
export function startLoadClient(script: string) {
  const proc = fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  let seq = 0
  const pending = new Map<number, { res: (v: unknown) => void; rej: (e: Error) => void }>()
  proc.on('message', (m: { id: number; result?: unknown; error?: string }) => {
    const p = pending.get(m.id)
    pending.delete(m.id)
    if (m.error !== undefined) p?.rej(new Error(m.error))
    else p?.res(m.result)
  })
  const job = <T>(j: Job): Promise<T> =>
    new Promise<T>((res, rej) => {
      pending.set(seq, { res: res as (v: unknown) => void, rej })
      proc.send({ id: seq++, job: j })
    })
  return { proc, job }
}

/** tokentap as the benchmark runs it: its own process, the el-probe preloaded, a log line per request on stdout. */
export interface TokentapProcess {
  readonly proc: ChildProcess
  readonly port: number
  readonly adminPort: number
  ask(cmd: string, reply: string): Promise<Record<string, number>>
}

/**
 * Starts `dist/src/server.js` with a generated config (a `/t` route to the simulator, logs at
 * info), under --expose-gc with bench/el-probe.js preloaded, plus `flags`; each stdout line goes to
 * `onLine`. Resolves once it listens.
 */
export async function startTokentap(
  dist: string,
  dir: string,
  simPort: number,
  opts: {
    maxModels: number
    flags?: readonly string[]
    onLine?: (line: string) => void
    extraRoutes?: readonly { prefix: string; upstream: string }[]
    /** The OTLP metrics export, to `endpoint` every `intervalMs`. */
    otel?: { endpoint: string; intervalMs: number }
    /** Spans on (`otel.traces`, default sampling), exported to `endpoint`. */
    traces?: { endpoint: string; ratio?: number }
    wrap?: readonly string[]
    /** Leave `limits.max_label_sets` out (a build from before the label-set budget, bench:lab's `--base`). */
    noLabelSetBudget?: boolean
    /** The dist/ whose src/server.js runs (another build of tokentap); the probe stays this one's. */
    serverDist?: string
    /** The process's environment (default: this one's). */
    env?: NodeJS.ProcessEnv
  },
): Promise<TokentapProcess> {
  const [port, adminPort] = [await freePort(), await freePort()]
  const config = join(dir, 'tokentap.yaml')
  const route = (prefix: string, upstream: string): string => `  - prefix: ${prefix}\n    upstream: ${upstream}\n    provider: openai\n`
  const otel = opts.otel === undefined ? '' : `otel: { endpoint: "${opts.otel.endpoint}", interval_ms: ${opts.otel.intervalMs} }\n`
  const sample = opts.traces?.ratio === undefined ? '' : `, sample: { ratio: ${opts.traces.ratio} }`
  const traces = opts.traces === undefined ? '' : `otel: { traces: { endpoint: "${opts.traces.endpoint}"${sample} } }\n`
  const routes = [{ prefix: '/t', upstream: `http://127.0.0.1:${simPort}` }, ...(opts.extraRoutes ?? [])].map((r) => route(r.prefix, r.upstream)).join('')
  writeFileSync(
    config,
    `server: { host: 127.0.0.1, port: ${port} }\nadmin: { host: 127.0.0.1, port: ${adminPort} }\nlimits: { max_models_per_route: ${opts.maxModels}${opts.noLabelSetBudget === true ? '' : `, max_label_sets: ${opts.maxModels}`} }\nlog: { level: info }\n${otel}${traces}routes:\n${routes}`,
  )
  const args = [...(opts.flags ?? []), '--expose-gc', '--import', join(dist, 'bench', 'el-probe.js'), join(opts.serverDist ?? dist, 'src', 'server.js'), '--config', config]
  const [cmd, argv] = wrapped(opts.wrap ?? [], args)
  const proc = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'inherit', 'ipc'], env: opts.env })
  await new Promise<void>((listening) => {
    createInterface({ input: piped(proc.stdout, 'stdout') }).on('line', (text) => {
      if (text.includes('"msg":"tokentap listening"')) listening()
      opts.onLine?.(text)
    })
  })
  return { proc, port, adminPort, ask: (cmd, reply) => askChild(proc, cmd, reply) }
}

const owned: { proc: ChildProcess; signal: NodeJS.Signals }[] = []
/**
 * Stops `proc` when this process exits: Node children with SIGKILL (a graceful drain would wait
 * for streams nobody reads any more), nginx with SIGTERM (its master takes the workers with it).
 */
export function stopOnExit(proc: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (owned.length === 0) {
    process.on('exit', () => {
      for (const o of owned) if (o.proc.exitCode === null && o.proc.signalCode === null) o.proc.kill(o.signal)
    })
  }
  owned.push({ proc, signal })
}

/** The machine a run measured (the load average says how busy it was). */
export function machine(loadAtStart: number) {
  const cpu = /model name\s*:\s*(.+)/.exec(read('/proc/cpuinfo') ?? '')?.[1].trim() ?? cpus()[0]?.model ?? 'unknown'
  const r = (v: number): number => Math.round(v * 100) / 100
  return { nproc: cpus().length, cpu, node: process.version, kernel: read('/proc/sys/kernel/osrelease')?.trim() ?? '', loadavg_1m_at_start: r(loadAtStart), loadavg_1m_at_end: r(loadavg()[0]) }
}
