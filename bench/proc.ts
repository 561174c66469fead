import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { readFileSync, readdirSync } from 'node:fs'

/** CPU time and RSS of a process (and its children) from /proc: works for node and nginx alike. */

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

/** Direct children of a process (nginx workers of the master). */
export function children(pid: number): number[] {
  const out: number[] = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    const s = stat(Number(name))
    if (s !== undefined && Number(s[1]) === pid) out.push(Number(name))
  }
  return out
}

/** utime + stime of the processes, µs (all threads of each). */
export function cpuMicros(pids: readonly number[]): number {
  let ticks = 0
  for (const pid of pids) {
    const s = stat(pid)
    if (s !== undefined) ticks += Number(s[11]) + Number(s[12])
  }
  return ticks * TICK_US
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

/** Starts a Node script of ours that prints `{"port":N}` once listening (the simulator, the Node relay) on a free port. */
export async function startPortPrinter(script: string, args: readonly string[]): Promise<{ proc: ChildProcess; port: number }> {
  const proc = spawn(process.execPath, [script, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  const line = await new Promise<string>((res) => createInterface({ input: proc.stdout! }).once('line', res))
  return { proc, port: (JSON.parse(line) as { port: number }).port }
}
