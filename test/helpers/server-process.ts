import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { distPath } from './paths.ts'

/** The real server in a child process, built: `dist/src/server.js` (built before the tests: test/helpers/build-dist.mjs). */
export interface ServerProcess {
  readonly child: ChildProcess
  /** JSON log lines from stdout so far. */
  readonly logs: Record<string, unknown>[]
  /** Everything written to stderr so far. */
  stderr(): string
  /** The first log line (so far or to come) that `match` accepts. */
  waitForLog(match: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>
  /** Resolves with the exit code (or signal name). */
  readonly exited: Promise<number | string>
  /** Stops the process if it still runs (SIGTERM, then SIGKILL after 5 s) and removes the temporary config. */
  kill(): Promise<void>
}

const SERVER = distPath('src/server.js')

/**
 * `config` as the file; `server.drain_linger_seconds` is 0 unless given (a test that scrapes and
 * then stops the process would wait the 15 s linger for nothing; test/e2e/drain-linger.test.ts
 * tests the linger).
 */
export function startServerProcess(config: Record<string, unknown>): ServerProcess {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-server-'))
  const file = join(dir, 'config.yaml')
  const server = { drain_linger_seconds: 0, ...(config.server as Record<string, unknown> | undefined) }
  writeFileSync(file, stringify({ ...config, server }))
  // Plain node on the built JavaScript: no TypeScript loader in the child or its cluster workers.
  const child = spawn(process.execPath, [SERVER, '--config', file], { stdio: ['ignore', 'pipe', 'pipe'] })
  const logs: Record<string, unknown>[] = []
  let err = ''
  let partial = ''
  const waiters = new Set<() => void>()
  child.stdout?.setEncoding('utf8').on('data', (text: string) => {
    const lines = (partial + text).split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) {
      try {
        logs.push(JSON.parse(line) as Record<string, unknown>)
      } catch {
        logs.push({ raw: line })
      }
    }
    for (const w of waiters) w()
  })
  child.stderr?.setEncoding('utf8').on('data', (text: string) => (err += text))
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)))
  return {
    child,
    logs,
    stderr: () => err,
    exited,
    waitForLog(match, timeoutMs = 120_000) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          const found = logs.find(match)
          if (found === undefined) return
          waiters.delete(check)
          clearTimeout(timer)
          resolve(found)
        }
        const timer = setTimeout(() => {
          waiters.delete(check)
          reject(new Error(`no matching log line within ${timeoutMs} ms; stderr: ${err.slice(-2000)}`))
        }, timeoutMs)
        waiters.add(check)
        check()
      })
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM')
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
        await exited
        clearTimeout(timer)
      }
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
