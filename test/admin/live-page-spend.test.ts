import t from 'tap'
import { openChromium } from '../helpers/browser.ts'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'

/**
 * The live page's spend panel in a real browser (Debian's Chromium): with `pricing:` set, the
 * spend of the chosen window by model and by tenant, the same figures as llm_request_cost in the
 * scrape; a request's cost in its /debug/requests/{id}.
 */

/** What the page writes for an amount (its `money`). */
const money = (v: number): string => `${v >= 1 ? v.toFixed(2) : v.toPrecision(3)} USD`

t.test('the spend panel shows the spend by model and by tenant that the scrape reports', async (t) => {
  const chromium = await openChromium(t)
  if (chromium === undefined) return
  const { page } = chromium
  const proxy = await startProxy({
    routes: [simRoute()],
    metrics: { tenant: { header: 'x-tenant' } },
    // Dear prices, so a few simulated tokens make a figure worth reading.
    pricing: { snapshot: false, models: { 'sim-priced': { input: 1000, output: 3000 } } },
  })
  t.teardown(() => proxy.close())
  const pageErrors: string[] = []
  page.on('pageerror', (err) => pageErrors.push(err.message))
  await page.goto(`${proxy.adminUrl}/`)
  await page.waitForSelector('#conn[data-conn="open"]', { timeout: 15_000 })
  t.equal(await page.locator('#spend-panel').isHidden(), true, 'no panel before a priced request')

  const post = async (tenant: string, model: string, tokens: number): Promise<void> => {
    const plan = simPlan({ ttft_ms: 5, first_tokens: 1, chunks: Array.from({ length: tokens - 1 }, () => [1, 1] as [number, number]) })
    const res = await fetch(`${proxy.url}/sim/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant': tenant, ...plan.headers },
      body: JSON.stringify({ model, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] }),
    })
    await res.arrayBuffer()
  }
  await post('team-a', 'sim-priced', 3)
  await post('team-a', 'sim-priced', 5)
  await post('team-b', 'sim-priced', 2)
  await post('team-b', 'unpriced', 4)
  const lines = await proxy.waitForRequests(4)
  const m = await proxy.scrape()
  const spent = (match: Record<string, string>): number => sumOf(m, 'llm_request_cost_sum', match)
  t.ok(spent({}) > 0, `${spent({})} USD in the scrape`)
  t.ok(select(m, 'llm_unpriced_tokens_total', { model: 'unpriced' }).length > 0, 'the unpriced model is counted apart')

  await page.waitForSelector('#spend-panel:not([hidden]) tr[data-spend-tenant="team-b"]', { timeout: 15_000 })
  t.equal(await page.locator('#spend-total').textContent(), money(spent({})), 'the total of the window')
  t.equal(await page.locator('tr[data-spend-model="sim-priced"] td').last().textContent(), money(spent({ model: 'sim-priced' })), 'by model')
  t.equal(await page.locator('tr[data-spend-tenant="team-a"] td').last().textContent(), money(spent({ tenant: 'team-a' })), 'team-a')
  t.equal(await page.locator('tr[data-spend-tenant="team-b"] td').last().textContent(), money(spent({ tenant: 'team-b' })), 'team-b: its priced request only')
  t.equal(await page.locator('tr[data-spend-model="unpriced"]').count(), 0, 'a model with no price spends nothing on the page')
  const rows = await page.locator('#spend tr[data-spend-tenant]').evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-spend-tenant')))
  t.same(rows, ['team-a', 'team-b'], 'the costliest first')

  // A request's own cost in its /debug/requests/{id}.
  const first = lines.find((l) => l.model === 'sim-priced' && l.tenant === 'team-b') as Record<string, unknown>
  const view = (await (await fetch(`${proxy.adminUrl}/debug/requests/${String(first.request_id)}`)).json()) as { cost: { currency: string; total: number; estimated: boolean } }
  t.same(view.cost, { currency: 'USD', total: (first.cost as { total: number }).total, estimated: (first.cost as { estimated: boolean }).estimated }, 'the debug view carries the log line’s cost')
  const unpriced = lines.find((l) => l.model === 'unpriced') as Record<string, unknown>
  const none = (await (await fetch(`${proxy.adminUrl}/debug/requests/${String(unpriced.request_id)}`)).json()) as { cost: unknown }
  t.equal(none.cost, null, 'an unpriced request has no cost there')
  t.same(pageErrors, [], 'no script errors')
})
