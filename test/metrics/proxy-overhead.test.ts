import t from 'tap'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'

const body = JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [] })

t.test('a streamed request observes each llm_proxy_overhead_seconds phase once, within the request’s own end-to-end time', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const plan = simPlan({
    ttft_ms: 5,
    chunks: [
      [5, 1],
      [5, 1],
      [5, 1],
    ],
  })
  for (let i = 0; i < 2; i++) {
    const res = await fetch(`${proxy.url}/sim/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...plan.headers }, body })
    await res.text()
  }
  await proxy.waitForRequests(2)
  const samples = await proxy.scrape()
  const of = (name: string, phase: string): number[] => samples.filter((s) => s.name === name && s.labels.phase === phase).map((s) => s.value)
  const e2eSum = samples.find((s) => s.name === 'llm_request_duration_seconds_sum')?.value ?? Number.NaN
  for (const phase of ['request', 'first_chunk', 'chunk']) {
    t.same(of('llm_proxy_overhead_seconds_count', phase), [2], `${phase}: one observation per request`)
    const [sum] = of('llm_proxy_overhead_seconds_sum', phase)
    t.ok(sum >= 0 && sum < e2eSum, `${phase}: ${sum} s, below the requests' end-to-end ${e2eSum} s`)
  }
})
