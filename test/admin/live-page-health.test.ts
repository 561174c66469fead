import t from 'tap'
import { openChromium } from '../helpers/browser.ts'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'

/**
 * The live page's health column in a real browser (Debian's Chromium, 1400 px wide): the error
 * rate and the errors by status, goodput for a route with an SLO, the process and instance, and
 * a failed request's id that opens its /debug/requests/{id}.
 */

t.test('the health column shows the error rate by status, SLO goodput and a failed request that opens its /debug/requests/{id}', async (t) => {
  const chromium = await openChromium(t)
  if (chromium === undefined) return
  const { page } = chromium
  const refusing = await startUpstream((_req, res) => {
    res.writeHead(401, { 'content-type': 'application/json' })
    res.end('{"error":{"message":"bad key"}}')
  })
  t.teardown(() => refusing.close())
  const proxy = await startProxy({
    routes: [
      { ...simRoute(), slo: { ttft_seconds: 0.5 } },
      { prefix: '/refusing', upstream: refusing.url, provider: 'openai' },
      // Nothing listens on port 9: the proxy answers 502.
      { prefix: '/down', upstream: 'http://127.0.0.1:9', provider: 'openai' },
    ],
  })
  t.teardown(() => proxy.close())
  const pageErrors: string[] = []
  page.on('pageerror', (err) => pageErrors.push(err.message))
  await page.goto(`${proxy.adminUrl}/`)
  await page.waitForSelector('#conn[data-conn="open"]', { timeout: 15_000 })

  const post = async (path: string, plan?: object): Promise<void> => {
    const res = await fetch(`${proxy.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(plan === undefined ? {} : simPlan(plan as never).headers) },
      body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    })
    await res.arrayBuffer()
  }
  // Three within the SLO's 500 ms TTFT, one far past it; one 401 and one 502.
  for (let i = 0; i < 3; i++) await post('/sim/v1/chat/completions', { ttft_ms: 10, first_tokens: 1, chunks: [[5, 1]] })
  await post('/sim/v1/chat/completions', { ttft_ms: 900, first_tokens: 1, chunks: [[5, 1]] })
  await post('/refusing/v1/chat/completions')
  await post('/down/v1/chat/completions')
  const lines = await proxy.waitForRequests(6)
  const down = lines.find((l) => l.route === '/down')
  t.ok(down)

  await page.waitForSelector('#errors tr[data-status="502"]', { timeout: 15_000 })
  t.equal(await page.locator('#err-rate').textContent(), '33.3 %', '2 of 6 requests failed')
  t.match(await page.locator('#errors tr[data-status="502"]').textContent(), /502.*upstream.*1.*16\.7 %/)
  t.match(await page.locator('#errors tr[data-status="401"]').textContent(), /401.*client.*1.*16\.7 %/)
  await page.waitForSelector('#slo-panel:not([hidden]) tr[data-slo-route="/sim"]', { timeout: 15_000 })
  t.match(await page.locator('tr[data-slo-route="/sim"]').textContent(), /\/sim\s*75 %\s*3\s*1/, 'goodput: 3 of 4 judged requests met the SLO')
  t.match(await page.locator('#inst').textContent(), /pid \d+ · tokentap \d+\.\d+\.\d+ · Node \d+/)
  t.match(await page.locator('#proc').textContent(), /CPU, share of one core[\d.]+ %.*resident \/ heap used\d+ MB \/ \d+ MB/s)

  // The health column is the right half of the wide screen, beside the streams.
  const side = await page.locator('aside.side').boundingBox()
  const strip = await page.locator('#strip').boundingBox()
  t.ok(side !== null && strip !== null && side.x > strip.x + strip.width, `the health column (x ${side?.x}) is right of the strip (ends at ${(strip?.x ?? 0) + (strip?.width ?? 0)})`)
  t.ok(side !== null && side.x < 1400 * 0.65 && side.width > 1400 * 0.3, 'and takes a good part of the width')
  for (const card of await page.locator('#routes .card').all()) {
    const box = await card.boundingBox()
    t.ok(box !== null && side !== null && box.x + box.width < side.x, 'no route card reaches into the health column')
  }

  if (process.env.LIVE_HEALTH_SCREENSHOT !== undefined) await page.screenshot({ path: process.env.LIVE_HEALTH_SCREENSHOT, fullPage: true })

  // The failed request's id opens its figures.
  const link = page.locator(`#failures li[data-failure="${String(down?.request_id)}"] a`)
  t.equal(await link.textContent(), down?.request_id)
  const [opened] = await Promise.all([page.context().waitForEvent('page'), link.click()])
  await opened.waitForLoadState()
  const view = JSON.parse((await opened.locator('body').textContent()) ?? '{}') as Record<string, unknown>
  t.equal(view.request_id, down?.request_id)
  t.equal(view.status, 502)
  t.equal(view.outcome, 'error')
  t.same(pageErrors, [], 'no script errors on the page')
})
