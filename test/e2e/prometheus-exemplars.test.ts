import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { simRoute, startProxy } from '../helpers/proxy.ts'

// A real Prometheus (Debian's package) scrapes tokentap with exemplar storage on: the exemplars
// must survive its OpenMetrics parser and come back from /api/v1/query_exemplars.
const hasPrometheus = spawnSync('prometheus', ['--version']).status === 0

async function freePort(): Promise<number> {
  const srv = createServer()
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve))
  const port = (srv.address() as AddressInfo).port
  await new Promise((resolve) => srv.close(resolve))
  return port
}

async function poll<T>(what: string, timeoutMs: number, get: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      const v = await get()
      if (v !== undefined) return v
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 250))
  }
}

t.test('a real Prometheus scrapes OpenMetrics and stores the request-id exemplars', { skip: hasPrometheus ? false : 'prometheus is not installed' }, async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], metrics: { exemplars: true } })
  t.teardown(() => proxy.close())
  const request = async (id: string): Promise<void> => {
    const r = await fetch(`${proxy.url}/sim/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-request-id': id,
        'x-tokentap-sim': JSON.stringify({
          ttft_ms: 20,
          chunks: [
            [10, 1],
            [30, 2],
          ],
        }),
      },
      body: JSON.stringify({ model: 'gpt-4o', stream: true, messages: [] }),
    })
    await r.text()
  }
  await request('req-prom-1')
  await proxy.waitForRequests(1)

  const dir = mkdtempSync(join(tmpdir(), 'tokentap-prom-'))
  const target = new URL(proxy.adminUrl).host
  writeFileSync(join(dir, 'prometheus.yml'), `global: { scrape_interval: 1s, evaluation_interval: 1s }\nscrape_configs:\n  - job_name: tokentap\n    static_configs: [{ targets: ['${target}'] }]\n`)
  const port = await freePort()
  const prom = spawn(
    'prometheus',
    [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--enable-feature=exemplar-storage', '--log.level=error'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  )
  let stderr = ''
  prom.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
  const exited = new Promise((resolve) => prom.once('exit', resolve))
  t.teardown(async () => {
    prom.kill('SIGTERM')
    await exited
    rmSync(dir, { recursive: true, force: true })
  })
  const api = `http://127.0.0.1:${port}/api/v1`

  const target0 = await poll('a scrape of tokentap', 60_000, async () => {
    const body = (await (await fetch(`${api}/targets`)).json()) as { data: { activeTargets: { health: string; lastError: string }[] } }
    const tg = body.data.activeTargets[0]
    return tg !== undefined && tg.health !== 'unknown' ? tg : undefined
  }).catch((err: Error) => {
    throw new Error(`${err.message}; prometheus stderr: ${stderr}`)
  })
  t.equal(target0.lastError, '', 'Prometheus parsed the exposition without error')
  t.equal(target0.health, 'up')

  const now = Date.now() / 1000
  type Series = { seriesLabels: Record<string, string>; exemplars: { labels: Record<string, string>; value: string }[] }[]
  let last = ''
  // Both requests may land in one bucket (the exposition keeps its latest exemplar only), so the
  // second request goes out once Prometheus has stored the first one's exemplar.
  const stored = (want: readonly string[]) =>
    poll(`exemplars of ${want.join(', ')}`, 40_000, async () => {
      const q = new URLSearchParams({ query: 'llm_time_to_first_token_seconds_bucket', start: String(now - 600), end: String(now + 600) })
      last = await (await fetch(`${api}/query_exemplars?${q}`)).text()
      const body = JSON.parse(last) as { data: Series }
      const ids = new Set(body.data.flatMap((s) => s.exemplars.map((e) => e.labels.request_id)))
      return want.every((id) => ids.has(id)) ? body.data : undefined
    }).catch((err: Error) => {
      throw new Error(`${err.message}; last answer: ${last}; stderr: ${stderr}`)
    })
  await stored(['req-prom-1'])
  await request('req-prom-2')
  await proxy.waitForRequests(2)
  const exemplars = await stored(['req-prom-1', 'req-prom-2'])
  const ids = exemplars.flatMap((s) => s.exemplars.map((e) => e.labels.request_id))
  t.same([...new Set(ids)].sort(), ['req-prom-1', 'req-prom-2'], 'each TTFT observation leads to its request')
  for (const s of exemplars) t.equal(s.seriesLabels.model, 'gpt-4o')

  const instant = async (query: string): Promise<number> => {
    const body = (await (await fetch(`${api}/query?${new URLSearchParams({ query })}`)).json()) as { data: { result: { value: [number, string] }[] } }
    return Number(body.data.result[0]?.value[1])
  }
  t.equal(await instant('sum(llm_requests_total)'), 2, 'OpenMetrics counters arrive under their _total names')
  t.ok((await instant('sum(process_cpu_user_seconds_total)')) > 0, 'prom-client process counters too')
})
