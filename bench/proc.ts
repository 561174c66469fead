import { fork, spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import type { Readable } from 'node:stream'
import { createInterface } from 'node:readline'
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { cpus, loadavg } from 'node:os'
import { join } from 'node:path'
import type { Job } from './load-client.ts'

/**
 * The benchmark's process helpers: CPU time and RSS from /proc (node and nginx alike), free
 * ports, and starting its Node processes (our listeners, the load generator, tokentap).
 */

const TICK_US = 1e6 / 100 // USER_HZ is 100 on Linux

function stat(pid: number): string[] | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // Fields after the command name, which may contain spaces: state is field 3.
    return text.slice(text.lastIndexOf(')') + 2).split(' ')
  } catch {
    return undefined
  }
}

/**
 * CPU time of one process, µs, all its threads: the sum of each thread's on-CPU nanoseconds in
 * /proc/PID/task/TID/schedstat (the scheduler's own clock), else utime + stime from /proc/PID/stat.
 * The stat fields count 10 ms ticks: a 600-request round of 0.15 ms a request is 9 ticks, so one
 * tick either way moved a round by 11%, more than the margins the targets judge. A thread that
 * ended during the window takes its time with it; the proxies' threads (V8's and libuv's
 * workers) live as long as the process.
 */
function processCpuMicros(pid: number): number | undefined {
  try {
    let ns = 0
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const text = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8')
      ns += Number(text.slice(0, text.indexOf(' ')))
    }
    if (Number.isFinite(ns)) return ns / 1000
  } catch {
    // no schedstat (a kernel without CONFIG_SCHED_INFO) or a thread gone while listed: the ticks below
  }
  const s = stat(pid)
  return s === undefined ? undefined : (Number(s[11]) + Number(s[12])) * TICK_US
}

/** CPU time of the processes, µs (all threads of each; see processCpuMicros). */
export function cpuMicros(pids: readonly number[]): number {
  let us = 0
  for (const pid of pids) us += processCpuMicros(pid) ?? 0
  return us
}

/** Resident set size of the processes, bytes. */
export function rssBytes(pids: readonly number[]): number {
  let kb = 0
  for (const pid of pids) {
    try {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
      if (m !== null) kb += Number(m[1])
    } catch {
      // gone
    }
  }
  return kb * 1024
}

/** A child's pid (undefined only when the spawn failed: there is nothing to measure then). */
export function pidOf(proc: ChildProcess): number {
  if (proc.pid === undefined) throw new Error(`${proc.spawnfile} did not start`)
  return proc.pid
}

/** A child's stdout or stderr that its `stdio` made a pipe (Node types it nullable for the other stdio kinds). */
export function piped(stream: Readable | null, what: string): Readable {
  if (stream === null) throw new Error(`${what} is not a pipe`)
  return stream
}

/**
 * Sends `{cmd}` to a child over its IPC channel and resolves with the first message whose `cmd`
 * is `reply` (the proxy's el-probe: `el-start` → `el-started`, `gc` → `gc-done`, …).
 */
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

/**
 * Starts a Node script of ours that prints `{"port":N}` once listening (the simulator, the Node
 * relay) on a free port. With `probe` (the path to bench/el-probe.js) it runs under --expose-gc with
 * the probe preloaded and an IPC channel, like tokentap: `ask` then reaches the probe.
 */
export async function startPortPrinter(
  script: string,
  args: readonly string[],
  probe?: string,
  wrap: readonly string[] = [],
): Promise<{ proc: ChildProcess; port: number; ask: (cmd: string, reply: string) => Promise<Record<string, number>> }> {
  const pre = probe === undefined ? [] : ['--expose-gc', '--import', probe]
  const [cmd, argv] = wrapped(wrap, [...pre, script, '--port', '0', ...args])
  const proc = spawn(cmd, argv, { stdio: probe === undefined ? ['ignore', 'pipe', 'inherit'] : ['ignore', 'pipe', 'inherit', 'ipc'] })
  const line = await new Promise<string>((res) => createInterface({ input: piped(proc.stdout, 'stdout') }).once('line', res))
  return { proc, port: (JSON.parse(line) as { port: number }).port, ask: (cmd, reply) => askChild(proc, cmd, reply) }
}

/**
 * The command that runs Node with `args`, under `wrap` when given (a tool that runs the rest of
 * its command line and keeps the pid: `valgrind … node …` for the instruction counts).
 */
function wrapped(wrap: readonly string[], args: readonly string[]): [string, string[]] {
  return wrap.length === 0 ? [process.execPath, [...args]] : [wrap[0], [...wrap.slice(1), process.execPath, ...args]]
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
export interface LoadClient {
  readonly proc: ChildProcess
  job<T>(job: Job): Promise<T>
}

export function startLoadClient(script: string): LoadClient {
  const proc = fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  let seq = 0
  const pending = new Map<number, { res: (v: unknown) => void; rej: (e: Error) => void }>()
  proc.on('message', (m: { id: number; result?: unknown; error?: string }) => {
    const p = pending.get(m.id)
    pending.delete(m.id)
    if (m.error !== undefined) p?.rej(new Error(m.error))
    else p?.res(m.result)
  })
  return {
    proc,
    job<T>(job: Job): Promise<T> {
      const id = seq++
      return new Promise<T>((res, rej) => {
        pending.set(id, { res: res as (v: unknown) => void, rej })
        proc.send({ id, job })
      })
    },
  }
}

/** tokentap as the benchmark runs it: its own process, the el-probe preloaded, a log line per request on stdout. */
export interface TokentapProcess {
  readonly proc: ChildProcess
  readonly port: number
  readonly adminPort: number
  ask(cmd: string, reply: string): Promise<Record<string, number>>
}

/**
 * Starts `dist/src/server.js` with a generated config (one `/t` route to the simulator, logs at
 * info, the OTLP export with `otel`), `--expose-gc` and bench/el-probe.js preloaded, plus `flags`; each stdout line goes to
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
    /** The OTLP export on, to `endpoint` every `intervalMs` (the config's `otel:` keys). */
    otel?: { endpoint: string; intervalMs: number }
    /** Spans on (`otel.traces`, default sampling), exported to `endpoint`. */
    traces?: { endpoint: string }
    /** A command that runs the process (`valgrind --tool=callgrind …`); see `wrapped`. */
    wrap?: readonly string[]
  },
): Promise<TokentapProcess> {
  const port = await freePort()
  const adminPort = await freePort()
  const config = join(dir, 'tokentap.yaml')
  writeFileSync(
    config,
    `# generated by the benchmark
server: { host: 127.0.0.1, port: ${port} }
admin: { host: 127.0.0.1, port: ${adminPort} }
limits: { max_models_per_route: ${opts.maxModels} }
log: { level: info }
${opts.otel === undefined ? '' : `otel: { endpoint: "${opts.otel.endpoint}", interval_ms: ${opts.otel.intervalMs} }\n`}${opts.traces === undefined ? '' : `otel: { traces: { endpoint: "${opts.traces.endpoint}" } }\n`}routes:
  - prefix: /t
    upstream: http://127.0.0.1:${simPort}
    provider: openai
${(opts.extraRoutes ?? []).map((r) => `  - prefix: ${r.prefix}\n    upstream: ${r.upstream}\n    provider: openai\n`).join('')}`,
  )
  const args = [...(opts.flags ?? []), '--expose-gc', '--import', join(dist, 'bench', 'el-probe.js'), join(dist, 'src', 'server.js'), '--config', config]
  const [cmd, argv] = wrapped(opts.wrap ?? [], args)
  const proc = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] })
  let listening: () => void = () => {}
  const ready = new Promise<void>((r) => (listening = r))
  createInterface({ input: piped(proc.stdout, 'stdout') }).on('line', (text) => {
    if (text.includes('"msg":"tokentap listening"')) listening()
    opts.onLine?.(text)
  })
  await ready
  return { proc, port, adminPort, ask: (cmd, reply) => askChild(proc, cmd, reply) }
}

const owned: { proc: ChildProcess; signal: NodeJS.Signals }[] = []
/**
 * Stops `proc` when this process exits. Node children get SIGKILL: a graceful drain would wait
 * for streams nobody reads any more. nginx gets SIGTERM (its fast shutdown), so its master takes
 * the workers with it.
 */
export function stopOnExit(proc: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (owned.length === 0) {
    process.on('exit', () => {
      for (const o of owned) if (o.proc.exitCode === null && o.proc.signalCode === null) o.proc.kill(o.signal)
    })
  }
  owned.push({ proc, signal })
}

/** The machine a run measured (other work on it skews every figure: the load average says how busy it was). */
export function machine(loadAtStart: number): { nproc: number; cpu: string; node: string; kernel: string; loadavg_1m_at_start: number; loadavg_1m_at_end: number } {
  const read = (file: string): string => {
    try {
      return readFileSync(file, 'utf8')
    } catch {
      return '' // not Linux
    }
  }
  const cpu = /model name\s*:\s*(.+)/.exec(read('/proc/cpuinfo'))?.[1].trim() ?? cpus()[0]?.model ?? 'unknown'
  const r = (v: number): number => Math.round(v * 100) / 100
  return { nproc: cpus().length, cpu, node: process.version, kernel: read('/proc/sys/kernel/osrelease').trim(), loadavg_1m_at_start: r(loadAtStart), loadavg_1m_at_end: r(loadavg()[0]) }
}
