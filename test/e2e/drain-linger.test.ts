import t from 'tap'
import { eventually } from '../helpers/eventually.ts'
import { startServerProcess } from '../helpers/server-process.ts'

const LINGER_S = 5
const route = { prefix: '/sim', simulator: { jitter_ms: 0, stall_probability: 0 } }
// Five tokens 100 ms apart: the stream is still open when SIGTERM comes.
const plan = JSON.stringify({ ttft_ms: 10, chunks: Array.from({ length: 5 }, () => [100, 1]) })

const requestsOk = (text: string): number => Number(/^llm_requests_total\{[^}]*outcome="ok"[^}]*\} (\d+)$/m.exec(text)?.[1] ?? 0)

t.test('after SIGTERM a scraped process answers /metrics, the drained stream counted, for server.drain_linger_seconds after its last stream ended, then exits 0', async (t) => {
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0, drain_seconds: 30, drain_linger_seconds: LINGER_S },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    routes: [route],
  })
  t.teardown(() => server.kill())
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening')
  const proxy = `http://${up.proxy as string}`
  const admin = `http://${up.admin as string}`
  t.equal(requestsOk(await (await fetch(`${admin}/metrics`)).text()), 0, 'scraped once before: nothing counted yet')

  const res = await fetch(`${proxy}/sim/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-tokentap-sim': plan },
    body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
  })
  server.child.kill('SIGTERM')
  await server.waitForLog((l) => l.msg === 'draining')
  t.match(await res.text(), /data: \[DONE\]/, 'the stream open at SIGTERM ran to its end')

  const lingering = await server.waitForLog((l) => l.msg === 'lingering: /metrics answers until the next scrape')
  t.equal(lingering.linger_seconds, LINGER_S)
  const scrape = await fetch(`${admin}/metrics`)
  t.equal(scrape.status, 200, '/metrics answers after the drain')
  t.equal(requestsOk(await scrape.text()), 1, 'and counts the stream that ended during the drain')
  t.equal((await fetch(`${admin}/readyz`)).status, 503, '/readyz still says not ready')

  t.equal(await server.exited, 0, 'the process exits 0 after the linger')
  const stopped = server.logs.find((l) => l.msg === 'stopped') as { time: number }
  t.ok(stopped.time - (lingering.time as number) >= LINGER_S * 1000, `stopped ${stopped.time - (lingering.time as number)} ms after the linger began`)
})

t.test('a process nothing scraped exits right after its drain: there is no scraper to wait for', async (t) => {
  const server = startServerProcess({
    // A linger no test could wait out: the exit shows it was skipped.
    server: { host: '127.0.0.1', port: 0, drain_seconds: 30, drain_linger_seconds: 3600 },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    routes: [route],
  })
  t.teardown(() => server.kill())
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening')
  t.equal((await fetch(`http://${up.admin as string}/readyz`)).status, 200)
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0, 'exits 0')
  t.notOk(
    server.logs.some((l) => l.msg === 'lingering: /metrics answers until the next scrape'),
    'without lingering',
  )
})

t.test('with workers: 2 each scraped worker lingers after its drain, so the primary\u2019s /metrics reads the stream that ended during it', async (t) => {
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0, workers: 2, drain_seconds: 30, drain_linger_seconds: LINGER_S },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    routes: [route],
  })
  t.teardown(() => server.kill())
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening', 300_000)
  const proxy = `http://${up.proxy as string}`
  const admin = `http://${up.admin as string}`
  // The primary's scrape asks both workers: both have been scraped.
  t.equal(requestsOk(await (await fetch(`${admin}/metrics`)).text()), 0, 'scraped once before: nothing counted yet')
  const res = await fetch(`${proxy}/sim/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-tokentap-sim': plan },
    body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
  })
  server.child.kill('SIGTERM')
  await server.waitForLog((l) => l.msg === 'draining')
  t.match(await res.text(), /data: \[DONE\]/, 'the stream open at SIGTERM ran to its end')
  // Both workers linger once drained (the one without the stream at once).
  await eventually(
    'both workers to linger',
    () => server.logs.filter((l) => l.msg === 'lingering: /metrics answers until the next scrape').length,
    (n) => n === 2,
  )
  const scrape = await fetch(`${admin}/metrics`)
  t.equal(scrape.status, 200, 'the primary\u2019s /metrics answers')
  t.equal(requestsOk(await scrape.text()), 1, 'with the stream that ended during the drain')
  t.equal((await fetch(`${admin}/readyz`)).status, 503, 'not ready')
  t.equal(await server.exited, 0, 'then the workers and the primary exit 0')
})
