import { randomBytes } from 'node:crypto'
import t from 'tap'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { parseMetrics } from '../helpers/prometheus.ts'

const MAX = 5
const FLOOD = 200

t.test('a flood of random model names keeps at most max_models_per_route values per route, then other', async (t) => {
  // The upstream echoes a random model in its answer too, so both request and response names are user-controlled.
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ id: 'x', object: 'chat.completion', model: randomBytes(8).toString('hex'), choices: [], usage: { prompt_tokens: 1, completion_tokens: 1 } }))
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/a', upstream: upstream.url }, { prefix: '/b', upstream: upstream.url }, simRoute()], limits: { max_models_per_route: MAX } })
  t.teardown(() => proxy.close())

  for (let i = 0; i < FLOOD; i++) {
    const route = i % 2 === 0 ? '/a' : '/b'
    // Half the requests name no model at all: the response's (random) name is used.
    const body = i % 4 < 2 ? JSON.stringify({ model: `m-${randomBytes(6).toString('hex')}`, messages: [] }) : '{}'
    const res = await fetch(`${proxy.url}${route}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    await res.arrayBuffer()
  }
  await proxy.waitForRequests(FLOOD)
  const m = parseMetrics(await proxy.scrapeText())
  for (const route of ['/a', '/b']) {
    const models = new Set(m.filter((s) => s.labels.route === route && s.labels.model !== undefined).map((s) => s.labels.model))
    t.equal(models.size, MAX + 1, `${route}: ${MAX} names and 'other'`)
    t.ok(models.has('other'))
  }
  const requests = m.filter((s) => s.name === 'llm_requests_total')
  t.equal(
    requests.reduce((n, s) => n + s.value, 0),
    FLOOD,
    'every request is still counted',
  )
  t.equal(
    requests.filter((s) => s.labels.model === 'other').reduce((n, s) => n + s.value, 0),
    FLOOD - 2 * MAX,
    'the rest are counted as other',
  )

  // A second flood adds no series at all. Only llm_ series count: a GC kind first seen under load adds
  // nodejs_gc_duration_seconds series that have nothing to do with model names.
  const llmSeries = (all: ReturnType<typeof parseMetrics>): number => all.filter((s) => s.name.startsWith('llm_')).length
  const series = llmSeries(m)
  for (let i = 0; i < 50; i++) {
    const res = await fetch(`${proxy.url}/a/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ model: `n-${i}` }) })
    await res.arrayBuffer()
  }
  await proxy.waitForRequests(FLOOD + 50)
  t.equal(llmSeries(parseMetrics(await proxy.scrapeText())), series, 'the scrape does not grow with more names')
})

t.test('a model name longer than 128 characters is cut, and label values are escaped in the scrape', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{}')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/a', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const weird = `q"\\\n}{${'x'.repeat(200)}`
  await (await fetch(`${proxy.url}/a/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ model: weird }) })).arrayBuffer()
  await proxy.waitForRequests(1)
  const m = parseMetrics(await proxy.scrapeText())
  const models = new Set(m.filter((s) => s.name === 'llm_requests_total').map((s) => s.labels.model))
  t.same([...models], [weird.slice(0, 128)], 'the scrape parses and carries the cut name')
})
