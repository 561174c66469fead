import type { ServerResponse } from 'node:http'
import t from 'tap'
import { FOLD_MESSAGE } from '../../src/record/label-fold.ts'
import { eventually } from '../helpers/eventually.ts'
import { startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'
import { startUpstream } from '../helpers/upstream.ts'

/** A whole JSON answer with usage, so every request records tokens too. */
function answer(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify({ id: 'x', object: 'chat.completion', choices: [], usage: { prompt_tokens: 1, completion_tokens: 1 } }))
}

/** The distinct base label sets (provider, model, route, tenant) over every llm_ series. */
function labelSets(samples: readonly Sample[]): Set<string> {
  const sets = new Set<string>()
  for (const s of samples) if (s.name.startsWith('llm_') && s.labels.model !== undefined) sets.add(`${s.labels.provider}|${s.labels.model}|${s.labels.route}|${s.labels.tenant}`)
  return sets
}

const BUDGET = 4
const SETS = 10

t.test('label sets beyond limits.max_label_sets are folded into other, counted by llm_label_sets_folded_total and logged once', async (t) => {
  const upstream = await startUpstream((_req, res) => answer(res))
  t.teardown(() => upstream.close())
  const proxy = await startProxy({
    routes: [{ prefix: '/a', upstream: upstream.url, provider: 'openai' }],
    limits: { max_label_sets: BUDGET },
    metrics: { tenant: { header: 'x-team', max_values: 100 } },
  })
  t.teardown(() => proxy.close())

  // Each request a set of its own: one model, ten tenants; each set twice.
  for (let round = 0; round < 2; round++)
    for (let i = 0; i < SETS; i++) {
      const res = await fetch(`${proxy.url}/a/v1/chat/completions`, { method: 'POST', headers: { 'x-team': `team-${i}` }, body: JSON.stringify({ model: 'm' }) })
      await res.arrayBuffer()
    }
  await proxy.waitForRequests(2 * SETS)
  const m = await proxy.scrape()
  const sets = labelSets(m)
  t.equal(sets.size, BUDGET + 1, 'the budget and the overflow set')
  t.ok(sets.has('openai|other|/a|other'), 'the overflow set: model and tenant other')
  for (let i = 0; i < BUDGET; i++) t.equal(sumOf(m, 'llm_requests_total', { tenant: `team-${i}`, model: 'm' }), 2, `team-${i} came first and keeps its set`)
  t.equal(sumOf(m, 'llm_requests_total'), 2 * SETS, 'every request is still counted')
  t.equal(sumOf(m, 'llm_requests_total', { model: 'other', tenant: 'other' }), 2 * (SETS - BUDGET), 'the rest under the overflow set')
  t.equal(sumOf(m, 'llm_output_tokens_total'), 2 * SETS, 'and so are their tokens')
  t.same(
    select(m, 'llm_label_sets_folded_total').map((s) => [s.labels, s.value]),
    [[{ provider: 'openai', model: 'other', route: '/a', tenant: 'other' }, 2 * (SETS - BUDGET)]],
    'the folded counter counts the folded requests, under the overflow set',
  )
  const openMetrics = await (await fetch(`${proxy.adminUrl}/metrics`, { headers: { accept: 'application/openmetrics-text; version=1.0.0' } })).text()
  t.match(openMetrics, /# TYPE llm_label_sets_folded counter\nllm_label_sets_folded_total\{provider="openai",model="other",route="\/a",tenant="other"\} 12\n/, 'a counter family in OpenMetrics too')
  const warnings = proxy.logs.filter((l) => l.msg === FOLD_MESSAGE)
  t.equal(warnings.length, 1, 'one warn line, however many sets were folded')
  t.equal(warnings[0].level, 40, 'at warn')
  t.equal(warnings[0].max_label_sets, BUDGET)

  // The series count is bounded: more sets add nothing (the llm_ series: the process metrics come and go with GC kinds).
  const llmSeries = (samples: readonly Sample[]): number => samples.filter((s) => s.name.startsWith('llm_')).length
  const series = llmSeries(m)
  for (let i = SETS; i < 3 * SETS; i++)
    await (await fetch(`${proxy.url}/a/v1/chat/completions`, { method: 'POST', headers: { 'x-team': `team-${i}` }, body: JSON.stringify({ model: 'm' }) })).arrayBuffer()
  await proxy.waitForRequests(4 * SETS)
  t.equal(llmSeries(await proxy.scrape()), series, 'more label sets add no series')
})

const MAX_MODELS = 5
const IN_FLIGHT = 40

t.test('the in-flight gauge keeps to the model cap with more distinct models in flight than the cap allows', async (t) => {
  const held: ServerResponse[] = []
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n')
    held.push(res)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/a', upstream: upstream.url, provider: 'openai' }], limits: { max_models_per_route: MAX_MODELS } })
  t.teardown(() => proxy.close())

  const bodies = Array.from({ length: IN_FLIGHT }, async (_, i) => {
    const res = await fetch(`${proxy.url}/a/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ model: `m-${i}`, stream: true }) })
    return res.text()
  })
  await eventually(
    'every request held upstream',
    () => held.length,
    (n) => n === IN_FLIGHT,
  )
  const during = await proxy.scrape()
  const inFlight = select(during, 'llm_requests_in_flight')
  t.equal(
    inFlight.reduce((n, s) => n + s.value, 0),
    IN_FLIGHT,
    'every request in flight is counted',
  )
  t.equal(new Set(inFlight.map((s) => s.labels.model)).size, MAX_MODELS + 1, 'under at most the cap and other')

  for (const res of held) res.end('data: [DONE]\n\n')
  await Promise.all(bodies)
  await proxy.waitForRequests(IN_FLIGHT)
  const after = await proxy.scrape()
  const models = new Set(after.filter((s) => s.name.startsWith('llm_') && s.labels.model !== undefined).map((s) => s.labels.model))
  t.equal(models.size, MAX_MODELS + 1, 'no family has more than the cap and other, the gauge at 0 included')
  t.equal(sumOf(after, 'llm_requests_in_flight'), 0)
  t.equal(sumOf(after, 'llm_requests_total'), IN_FLIGHT)
  t.equal(sumOf(after, 'llm_requests_total', { model: 'other' }), IN_FLIGHT - MAX_MODELS, 'the models beyond the cap, counted as other')
  t.same(
    [...models].filter((m) => m !== 'other').sort(),
    select(after, 'llm_requests_in_flight')
      .map((s) => s.labels.model)
      .filter((m) => m !== 'other')
      .sort(),
    'the gauge and the counters name the same models',
  )
})
