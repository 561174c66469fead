import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, connect } from 'node:net'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'

/**
 * Debian's tinyproxy as a real corporate forward proxy on loopback, for the egress tests. Locally
 * a missing tinyproxy skips the test that needs it, saying so; in CI (`CI=true`, where .ci/run
 * installs it) it fails instead.
 */
export interface Tinyproxy {
  readonly url: string
  /** `CONNECT host:port` request lines tinyproxy has logged so far. */
  connects(): string[]
}

async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

const accepts = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = connect(port, '127.0.0.1')
    s.once('connect', () => {
      s.destroy()
      resolve(true)
    })
    s.once('error', () => resolve(false))
  })

/** Starts tinyproxy (stopped in teardown), or returns undefined after a skip (or a CI failure) when it is not installed. */
export async function startTinyproxy(t: Test): Promise<Tinyproxy | undefined> {
  const found = spawnSync('sh', ['-c', 'command -v tinyproxy'], { encoding: 'utf8' })
  const bin = found.status === 0 ? found.stdout.trim() : ''
  if (bin === '') {
    if (process.env.CI === 'true') t.fail('tinyproxy is not installed, and CI must run this test (apt-get install tinyproxy)')
    else t.pass('tinyproxy is needed', { skip: 'tinyproxy is not installed (apt-get install tinyproxy to run this; with CI=true it fails instead)' })
    return undefined
  }
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-tinyproxy-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const port = await freePort()
  // No ConnectPort line: CONNECT to any port is allowed (the test upstreams listen on port 0).
  // As root, tinyproxy wants a user to drop to. Logs go to stderr with -d.
  const root = process.getuid?.() === 0
  writeFileSync(
    join(dir, 'tinyproxy.conf'),
    [`Port ${port}`, 'Listen 127.0.0.1', 'Timeout 60', 'LogLevel Connect', 'MaxClients 100', 'Allow 127.0.0.1', ...(root ? ['User nobody', 'Group nogroup'] : []), ''].join('\n'),
  )
  const child = spawn(bin, ['-d', '-c', join(dir, 'tinyproxy.conf')], { stdio: ['ignore', 'pipe', 'pipe'] })
  let log = ''
  child.stdout.on('data', (c: Buffer) => (log += c.toString('utf8')))
  child.stderr.on('data', (c: Buffer) => (log += c.toString('utf8')))
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGTERM')
  })
  for (let i = 0; !(await accepts(port)); i++) {
    if (child.exitCode !== null || i > 500) throw new Error(`tinyproxy did not start: ${log}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return {
    url: `http://127.0.0.1:${port}`,
    connects: () => [...log.matchAll(/: CONNECT (\S+) HTTP/g)].map((m) => m[1]),
  }
}
