import t from 'tap'
import { FOLD_MESSAGE } from '../../src/record/label-fold.ts'
import { eventually } from '../helpers/eventually.ts'
import { simRoute } from '../helpers/proxy.ts'
import { parseMetrics, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'
import { startServerProcess } from '../helpers/server-process.ts'
import type { ServerProcess } from '../helpers/server-process.ts'

/**
 * With `server.workers > 1` every worker bounds its own labels; the group's bound is the
 * primary's (src/record/label-fold.ts): what /metrics serves keeps to the caps whatever the
 * workers admitted, and a worker that dies and is replaced adds no value.
 */

const CAP = 5
const PLAN = { ttft_ms: 1, chunks: [[1, 1]] }

let sent = 0

/** `n` requests, each with a model and a tenant of its own, 4 at a time (new connections spread over the workers). */
async function drive(proxyUrl: string, n: number): Promise<void> {
  const ids = Array.from({ length: n }, () => sent++)
  await Promise.all(
    Array.from({ length: 4 }, async (_, lane) => {
      for (let i = lane; i < ids.length; i += 4) {
        const id = ids[i]
        const res = await fetch(`${proxyUrl}/sim/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(PLAN), 'x-team': `team-${id}`, connection: 'close' },
          body: JSON.stringify({ model: `model-${id}`, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
        })
        await res.text()
      }
    }),
  )
}

/** The primary's /metrics once it counts `requests`. */
function scrapeUntil(adminUrl: string, requests: number): Promise<Sample[]> {
  return eventually(
    `${requests} requests in /metrics`,
    async () => parseMetrics(await (await fetch(`${adminUrl}/metrics`)).text()),
    (m) => sumOf(m, 'llm_requests_total') >= requests,
  )
}

const valuesOf = (m: readonly Sample[], label: string): Set<string> => new Set(m.filter((s) => s.name.startsWith('llm_') && s.labels[label] !== undefined).map((s) => s.labels[label]))

/** The pids of the workers that logged request lines so far. */
const workerPids = (server: ServerProcess): number[] => [...new Set(server.logs.filter((l) => l.msg === 'request').map((l) => Number(l.pid)))]

t.test('with workers: 2 models and tenants stay within the cap and other across both workers and after three worker deaths', async (t) => {
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0, workers: 2 },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    limits: { max_models_per_route: CAP },
    metrics: { tenant: { header: 'x-team', max_values: CAP } },
    routes: [simRoute()],
  })
  t.teardown(() => server.kill())
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening', 300_000)
  const proxyUrl = `http://${up.proxy as string}`
  const adminUrl = `http://${up.admin as string}`

  const check = async (when: string): Promise<void> => {
    const m = await scrapeUntil(adminUrl, sent)
    t.equal(sumOf(m, 'llm_requests_total'), sent, `${when}: every request counted once`)
    t.equal(valuesOf(m, 'model').size, CAP + 1, `${when}: ${CAP} models and other`)
    t.equal(valuesOf(m, 'tenant').size, CAP + 1, `${when}: ${CAP} tenants and other`)
    t.equal(sumOf(m, 'llm_requests_total', { model: 'other' }), sent - CAP, `${when}: the rest counted as other`)
  }

  await drive(proxyUrl, 40)
  await eventually(
    'request lines from both workers',
    () => workerPids(server),
    (pids) => pids.length === 2,
  )
  await check('both workers')

  for (let kill = 1; kill <= 3; kill++) {
    const victim = workerPids(server).at(-1) as number
    process.kill(victim, 'SIGKILL')
    await server.waitForLog((l) => l.msg === 'worker died: starting a new one' && l.pid === victim, 60_000)
    await eventually(
      'the replacement ready',
      async () => (await fetch(`${adminUrl}/readyz`)).status,
      (status) => status === 200,
      300_000,
    )
    const before = workerPids(server).length
    await drive(proxyUrl, 20)
    await eventually(
      'request lines from the replacement',
      () => workerPids(server).length,
      (n) => n > before,
    )
    await check(`after death ${kill}`)
  }
  t.notOk(
    server.logs.some((l) => l.msg === FOLD_MESSAGE),
    'value caps alone fold no label set',
  )
})

t.test('with workers: 2 the label-set budget holds for the group: the overflow set, the folded count and one warn line from the primary', async (t) => {
  const BUDGET = 3
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0, workers: 2 },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    limits: { max_label_sets: BUDGET },
    metrics: { tenant: { header: 'x-team', max_values: 100 } },
    routes: [simRoute()],
  })
  t.teardown(() => server.kill())
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening', 300_000)
  const proxyUrl = `http://${up.proxy as string}`
  const adminUrl = `http://${up.admin as string}`
  sent = 0
  await drive(proxyUrl, 20)
  await eventually(
    'request lines from both workers',
    () => workerPids(server),
    (pids) => pids.length === 2,
  )
  const m = await scrapeUntil(adminUrl, sent)
  const sets = new Set(m.filter((s) => s.name.startsWith('llm_') && s.labels.model !== undefined).map((s) => `${s.labels.model}|${s.labels.tenant}`))
  t.equal(sets.size, BUDGET + 1, 'the budget and the overflow set, over both workers')
  t.equal(sumOf(m, 'llm_requests_total'), sent, 'every request counted once')
  t.equal(sumOf(m, 'llm_requests_total', { model: 'other', tenant: 'other' }), sent - BUDGET, 'the rest under the overflow set')
  t.equal(sumOf(m, 'llm_label_sets_folded_total'), sent - BUDGET, 'each of them counted as folded, by a worker or by the primary')
  await server.waitForLog((l) => l.msg === FOLD_MESSAGE, 60_000)
  // Scrape again: the primary does not warn twice, and the workers never do.
  await scrapeUntil(adminUrl, sent)
  t.equal(server.logs.filter((l) => l.msg === FOLD_MESSAGE).length, 1, 'one warn line for the group')
})
