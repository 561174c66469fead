import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import t from 'tap'
import { openRequest, readAll, waitFor } from '../helpers/faults.ts'
import { distPath, ROOT } from '../helpers/paths.ts'

const SERVER = distPath('src/server.js')

interface Server {
  readonly proxy: string
  readonly admin: string
  readonly logs: Record<string, unknown>[]
  readonly exited: Promise<number | null>
  kill(signal: NodeJS.Signals): void
}

async function startServer(configFile: string): Promise<Server> {
  const child = spawn(process.execPath, [SERVER, '--config', configFile], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  const logs: Record<string, unknown>[] = []
  createInterface({ input: child.stdout }).on('line', (line) => {
    try {
      logs.push(JSON.parse(line) as Record<string, unknown>)
    } catch {
      logs.push({ raw: line })
    }
  })
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  await waitFor('the server to listen', () => logs.some((l) => l.msg === 'tokentap listening'), 300_000)
  const ready = logs.find((l) => l.msg === 'tokentap listening') as { proxy: string; admin: string }
  return { proxy: `http://${ready.proxy}`, admin: `http://${ready.admin}`, logs, exited, kill: (s) => child.kill(s) }
}

const planHeader = (chunks: number, gapMs: number): string => JSON.stringify({ ttft_ms: 10, chunks: Array.from({ length: chunks }, () => [gapMs, 1]) })

t.test('SIGTERM drains: /readyz 503, no new connections, open streams finish, late ones are cut as errors, exit 0', async (t) => {
  const dir = t.testdir({})
  const configFile = join(dir, 'tokentap.yaml')
  writeFileSync(
    configFile,
    [
      'server: { host: 127.0.0.1, port: 0, drain_seconds: 1.5 }',
      'admin: { host: 127.0.0.1, port: 0 }',
      'routes:',
      '  - prefix: /sim',
      '    simulator: { jitter_ms: 0, stall_probability: 0 }',
      '',
    ].join('\n'),
  )
  const server = await startServer(configFile)
  t.teardown(() => server.kill('SIGKILL'))

  const stream = async (plan: string) => {
    const { res } = await openRequest(`${server.proxy}/sim/v1/chat/completions`, {
      headers: { 'content-type': 'application/json', 'x-tokentap-sim': plan },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    })
    return {
      status: res.statusCode,
      body: readAll(res).then(
        (b) => ({ ok: true, text: b.toString() }),
        () => ({ ok: false, text: '' }),
      ),
    }
  }
  const short = await stream(planHeader(8, 60)) // about 0.5 s: finishes within the drain
  const long = await stream(planHeader(100, 100)) // about 10 s: still open at the 1.5 s deadline
  t.equal(short.status, 200)
  t.equal(long.status, 200)
  t.equal((await fetch(`${server.admin}/readyz`)).status, 200)
  // An idle keep-alive connection (fetch keeps it open) must not hold the drain.
  const models = await fetch(`${server.proxy}/sim/v1/models`)
  t.equal(models.status, 200)
  await models.arrayBuffer()

  const termAt = Date.now()
  server.kill('SIGTERM')
  await waitFor('readyz to turn 503', async () => (await fetch(`${server.admin}/readyz`)).status === 503, 5_000)
  await t.rejects(openRequest(`${server.proxy}/sim/v1/models`, { method: 'GET' }), { code: 'ECONNREFUSED' }, 'the listener no longer accepts new connections')

  const s = await short.body
  t.ok(s.ok, 'the stream in flight finished cleanly')
  t.match(s.text, /data: \[DONE\]/)
  const l = await long.body
  t.notOk(l.ok, 'the stream still open at the deadline is broken, not ended cleanly')
  t.equal(await server.exited, 0, 'the process exits 0')
  const took = Date.now() - termAt
  // Idle keep-alive connections would hold it 72 s (Fastify's keepAliveTimeout); a loaded machine may take a while.
  t.ok(took >= 1400 && took < 60_000, `exits after the drain deadline, not held by idle connections (${took} ms)`)

  const requests = server.logs.filter((x) => x.msg === 'request')
  // The GET /v1/models, the stream that finished, and the one cut at the deadline.
  t.same(requests.map((r) => [r.outcome, r.error]).sort(), [
    ['error', 'TOKENTAP_ERR_SHUTTING_DOWN'],
    ['ok', undefined],
    ['ok', undefined],
  ])
  t.ok(server.logs.some((x) => x.msg === 'drain deadline reached: ending open streams'))
  t.ok(server.logs.some((x) => x.msg === 'stopped'))
})

t.test('once the streams open at SIGTERM have ended, the process exits without waiting for drain_seconds, though their keep-alive connections stay open', async (t) => {
  const dir = t.testdir({})
  const configFile = join(dir, 'tokentap.yaml')
  writeFileSync(
    configFile,
    ['server: { host: 127.0.0.1, port: 0, drain_seconds: 30 }', 'admin: { host: 127.0.0.1, port: 0 }', 'routes:', '  - prefix: /sim', '    simulator: { jitter_ms: 0, stall_probability: 0 }', ''].join(
      '\n',
    ),
  )
  const server = await startServer(configFile)
  t.teardown(() => server.kill('SIGKILL'))
  // fetch keeps its connection open after the answer (keep-alive), unlike openRequest's.
  const res = await fetch(`${server.proxy}/sim/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-tokentap-sim': planHeader(5, 60) },
    body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
  })
  server.kill('SIGTERM')
  t.match(await res.text(), /data: \[DONE\]/, 'the stream open at SIGTERM ran to its end')
  t.equal(await server.exited, 0, 'the process exits 0')
  t.notOk(
    server.logs.some((x) => x.msg === 'drain deadline reached: ending open streams'),
    'it did not wait for the deadline (the finished stream’s idle connection was closed)',
  )
  t.same(
    server.logs.filter((x) => x.msg === 'request').map((r) => r.outcome),
    ['ok'],
  )
})
