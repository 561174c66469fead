import { spawn, spawnSync } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { askChild, freePort, piped } from '../proc.ts'

/**
 * The Portkey AI gateway (`@portkey-ai/gateway`, TypeScript on Hono) as the benchmark's real
 * peer: what a Node team would pick instead of tokentap. Installed on demand into a cache
 * directory outside the project's dependencies (bench/.cache/portkey, gitignored), skipped with
 * a hint when npm cannot install it, like nginx.
 *
 * Known facts it is run around:
 * - 1.15.x needs `@hono/node-server` 1.13.x: with 1.19 (which its own `^1.3.3` range and
 *   `@hono/node-ws` pull in) every chat call fails with `TypeError: immutable`. An npm
 *   `overrides` entry pins it for the whole tree.
 * - It listens on every interface (`serve()` without a hostname): bench/portkey-bind.js,
 *   preloaded, makes such a listen bind 127.0.0.1.
 * - It drops unknown body fields, so the simulator's plan travels in `x-tokentap-sim`, which
 *   `x-portkey-forward-headers` lets through to the upstream.
 */

const PORTKEY_VERSION = '~1.15.2'
const HONO_NODE_SERVER_VERSION = '~1.13.8'
export const PORTKEY_HINT = `Portkey gateway not installed (npm install of @portkey-ai/gateway@${PORTKEY_VERSION} failed or npm unreachable): skipping its columns`

const entry = (dir: string): string => join(dir, 'node_modules', '@portkey-ai', 'gateway', 'build', 'start-server.js')

/** The installed node-server is the pinned minor (a cache from another pin would fail every call). */
function installed(dir: string): boolean {
  if (!existsSync(entry(dir))) return false
  try {
    const v = (JSON.parse(readFileSync(join(dir, 'node_modules', '@hono', 'node-server', 'package.json'), 'utf8')) as { version: string }).version
    return v.startsWith('1.13.')
  } catch {
    return false
  }
}

/**
 * Installs the gateway into `dir` unless it is there already; returns its entry script, or
 * undefined (with npm's output on stderr) when it cannot be installed.
 */
export function ensurePortkey(dir: string, log: (s: string) => void): string | undefined {
  if (installed(dir)) return entry(dir)
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    join(dir, 'package.json'),
    `${JSON.stringify(
      {
        name: 'tokentap-bench-portkey',
        private: true,
        description: 'installed by npm run bench (bench/portkey.ts); not a dependency of tokentap',
        dependencies: { '@portkey-ai/gateway': PORTKEY_VERSION, '@hono/node-server': HONO_NODE_SERVER_VERSION },
        overrides: { '@hono/node-server': HONO_NODE_SERVER_VERSION },
      },
      null,
      2,
    )}\n`,
  )
  log(`installing @portkey-ai/gateway@${PORTKEY_VERSION} with @hono/node-server@${HONO_NODE_SERVER_VERSION} into ${dir}`)
  // --ignore-scripts: its postinstall runs patch-package on patches it does not ship.
  const r = spawnSync('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel', 'error'], { encoding: 'utf8', timeout: 180_000 })
  if (r.status !== 0 || !installed(dir)) {
    process.stderr.write(r.stderr ?? '')
    return undefined
  }
  return entry(dir)
}

export interface PortkeyProcess {
  readonly proc: ChildProcess
  readonly port: number
  ask(cmd: string, reply: string): Promise<Record<string, number>>
  /** Lines it wrote to stderr (it logs a stack trace for every client that leaves mid-stream). */
  stderrLines(): number
}

/**
 * Starts the gateway on a free 127.0.0.1 port (`--headless`: no log UI) with bench/el-probe.js
 * preloaded under --expose-gc, like tokentap; resolves once it answers `GET /`.
 */
export async function startPortkey(script: string, dist: string): Promise<PortkeyProcess> {
  const port = await freePort()
  const args = ['--expose-gc', '--import', join(dist, 'bench', 'lab', 'portkey-bind.js'), '--import', join(dist, 'bench', 'el-probe.js'), script, `--port=${port}`, '--headless']
  // Its banner and spinner go nowhere; its stderr is counted, not shown: every client that
  // leaves mid-stream costs a stack trace or two ("Response object has been garbage collected").
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe', 'ipc'], env: { ...process.env, NODE_ENV: 'production' } })
  let lines = 0
  let last = ''
  piped(proc.stderr, 'stderr')
    .setEncoding('utf8')
    .on('data', (s: string) => {
      for (const c of s) if (c === '\n') lines++
      last = (last + s).slice(-2000)
    })
  proc.on('exit', (code) => {
    if (code !== 0 && code !== null) process.stderr.write(`portkey exited with ${code}; its last output:\n${last}\n`)
  })
  for (let i = 0; i < 200; i++) {
    await new Promise((r) => setTimeout(r, 100))
    if (proc.exitCode !== null) throw new Error(`portkey exited with ${proc.exitCode}`)
    try {
      if ((await fetch(`http://127.0.0.1:${port}/`)).ok) break
    } catch {
      // not listening yet
    }
  }
  return { proc, port, ask: (cmd, reply) => askChild(proc, cmd, reply), stderrLines: () => lines }
}

/** The headers that route a chat request through the gateway to `upstream` (an OpenAI-compatible base URL) with `plan`. */
export function portkeyHeaders(upstream: string, plan: object): Record<string, string> {
  return {
    'x-portkey-provider': 'openai',
    'x-portkey-custom-host': upstream,
    authorization: 'Bearer bench',
    'x-portkey-forward-headers': 'x-tokentap-sim,x-request-id',
    'x-tokentap-sim': JSON.stringify(plan),
  }
}
