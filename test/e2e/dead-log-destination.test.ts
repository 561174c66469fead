import { execFileSync, spawn } from 'node:child_process'
import { closeSync, openSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import type { Test } from 'tap'
import { stringify } from 'yaml'
import { LogDestination } from '../../src/logger.ts'
import { distPath } from '../helpers/paths.ts'

const SERVER = distPath('src/server.js')
const DRAIN_SECONDS = 1

/** The real server as a child process; resolves once it listens, with its proxy address. */
async function start(t: Test) {
  const dir = t.testdir({})
  const file = join(dir, 'c.yaml')
  writeFileSync(
    file,
    stringify({
      server: { host: '127.0.0.1', port: 0, drain_seconds: DRAIN_SECONDS },
      admin: { host: '127.0.0.1', port: 0 },
      routes: [{ prefix: '/sim', simulator: { jitter_ms: 0, stall_probability: 0, ttft_ms: 1, itl_ms: 0 } }],
    }),
  )
  const child = spawn(process.execPath, [SERVER, '--config', file], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s))
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)))
  const proxy = await new Promise<string>((resolve, reject) => {
    let text = ''
    const onData = (s: string): void => {
      text += s
      const m = /"proxy":"([^"]+)"[^\n]*"msg":"tokentap listening"/.exec(text)
      if (m === null) return
      child.stdout.off('data', onData)
      resolve(`http://${m[1]}`)
    }
    child.stdout.setEncoding('utf8').on('data', onData)
    void exited.then((c) => reject(new Error(`exited ${c}: ${stderr}`)))
  })
  return { child, proxy, exited, stderr: () => stderr }
}

/** `n` short simulated completions, `concurrency` at a time; resolves with the statuses seen. */
async function traffic(proxy: string, n: number, concurrency = 8): Promise<Map<number, number>> {
  const statuses = new Map<number, number>()
  let next = 0
  const worker = async (): Promise<void> => {
    while (next++ < n) {
      const res = await fetch(`${proxy}/sim/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-tokentap-sim': '{"ttft_ms":1,"chunks":[[0,1]]}' },
        body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
      })
      await res.arrayBuffer()
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  return statuses
}

/** Resolves with how the process ended, or 'still running' after `ms`. */
/**
 * How long the test waits for the exit. The process's own limit is drain_seconds + 5 s, after
 * which it exits 1 by itself: exit code 0 is what shows it drained in time. The wait only
 * catches a process that never ends, with room for a loaded machine that is slow to run it.
 */
const EXIT_WAIT_MS = 90_000

const within = (exited: Promise<number | string>, ms: number): Promise<number | string> => Promise.race([exited, new Promise<string>((r) => setTimeout(() => r('still running'), ms).unref())])

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  t.test(`on a socket (what a spawning Node parent gives) whose reader is gone, the proxy keeps serving and ${signal} ends it within drain_seconds + 5 s`, async (t) => {
    const server = await start(t)
    // The reader goes away: every later write to stdout fails with EPIPE.
    server.child.stdout.destroy()
    const statuses = await traffic(server.proxy, 200)
    t.same([...statuses], [[200, 200]], 'every request answered after the log reader died')
    server.child.kill(signal)
    t.equal(await within(server.exited, EXIT_WAIT_MS), 0, 'exited 0 in time')
    t.notMatch(server.stderr(), /\n\s+at /, 'no stack trace')
  })
}

t.test('on a socket whose reader never reads, the proxy keeps serving and SIGTERM ends it within drain_seconds + 5 s', async (t) => {
  const server = await start(t)
  // Nothing reads any more: the pipe fills (64 KiB in the kernel, then this side's buffer) and
  // the server's writes to it block.
  server.child.stdout.pause()
  const statuses = await traffic(server.proxy, 600)
  t.same([...statuses], [[200, 600]], 'every request answered with the log pipe full')
  server.child.kill('SIGTERM')
  t.equal(await within(server.exited, EXIT_WAIT_MS), 0, 'exited 0 in time')
})

/** Two ports free right now (the server must know them in advance: its log goes where this test cannot read it). */
async function freePorts(): Promise<[number, number]> {
  const one = (): Promise<number> =>
    new Promise((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const { port } = s.address() as AddressInfo
        s.close(() => resolve(port))
      })
    })
  return [await one(), await one()]
}

/**
 * The real server with its stdout on a named pipe (what a shell's `tokentap | reader` gives),
 * read by `reader` (a shell command run with the pipe as its stdin); resolves once /readyz answers.
 */
async function startOnFifo(t: Test, reader: string) {
  const dir = t.testdir({})
  const fifo = join(dir, 'stdout')
  execFileSync('mkfifo', [fifo])
  const [port, adminPort] = await freePorts()
  const file = join(dir, 'c.yaml')
  writeFileSync(
    file,
    stringify({
      server: { host: '127.0.0.1', port, drain_seconds: DRAIN_SECONDS },
      admin: { host: '127.0.0.1', port: adminPort },
      routes: [{ prefix: '/sim', simulator: { jitter_ms: 0, stall_probability: 0, ttft_ms: 1, itl_ms: 0 } }],
    }),
  )
  const readerProcess = spawn('sh', ['-c', `exec ${reader} < "${fifo}"`], { stdio: ['ignore', 'ignore', 'ignore'] })
  // Opening a FIFO for writing waits for its reader: the shell above opens it at once.
  const fd = openSync(fifo, 'w')
  const child = spawn(process.execPath, [SERVER, '--config', file], { stdio: ['ignore', fd, 'ignore'] })
  closeSync(fd)
  t.teardown(() => {
    for (const p of [child, readerProcess]) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL')
  })
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)))
  for (;;) {
    const ready = await fetch(`http://127.0.0.1:${adminPort}/readyz`).then(
      (r) => r.ok,
      () => false,
    )
    if (ready) break
    if (child.exitCode !== null) throw new Error(`exited ${child.exitCode}`)
    await new Promise((r) => setTimeout(r, 20))
  }
  return { child, proxy: `http://127.0.0.1:${port}`, exited }
}

// 600 request lines are far more than a pipe's 64 KiB: a blocking pipe's writes would block.
const FIFO_READERS = [
  { reader: 'head -1', what: 'whose reader left after one line (tokentap | head -1)', expect: 'every request answered after the log reader died' },
  { reader: 'sleep 600', what: 'whose reader never reads (tokentap | sleep)', expect: 'every request answered with the log pipe full' },
]
for (const { reader, what, expect } of FIFO_READERS) {
  t.test(`on a named pipe ${what}, the proxy keeps serving and SIGTERM ends it within drain_seconds + 5 s`, async (t) => {
    const server = await startOnFifo(t, reader)
    const statuses = await traffic(server.proxy, 600)
    t.same([...statuses], [[200, 600]], expect)
    server.child.kill('SIGTERM')
    t.equal(await within(server.exited, EXIT_WAIT_MS), 0, 'exited 0 in time')
  })
}

t.test('a destination whose descriptor fails (EBADF) drops lines from then on without throwing', async (t) => {
  // A descriptor just closed: nothing else in this process opens files meanwhile.
  const fd = openSync(fileURLToPath(import.meta.url), 'r')
  closeSync(fd)
  const dest = new LogDestination(fd, { batchBytes: 10, flushMs: 1 })
  t.equal(dest.write('{"msg":"one line that fills a batch"}\n'), true)
  await dest.drain(2_000)
  t.equal(dest.failed?.code, 'EBADF')
  for (let i = 0; i < 1000; i++) dest.write('{"msg":"later"}\n')
  t.equal(dest.dropped, 1000, 'every later line dropped')
  await dest.drain(2_000)
})

t.test('a destination drops lines past its buffer bound instead of growing', async (t) => {
  const dir = t.testdir({})
  const fd = openSync(join(dir, 'log'), 'w')
  t.teardown(() => closeSync(fd))
  const dest = new LogDestination(fd, { batchBytes: 1 << 20, flushMs: 10_000, maxBufferBytes: 100 })
  for (let i = 0; i < 20; i++) dest.write('0123456789\n')
  t.equal(dest.dropped, 11, '9 lines of 11 characters fit in 100')
  await dest.drain(2_000)
  t.equal(dest.failed, undefined)
})
