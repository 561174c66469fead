import t from 'tap'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { findTool, run } from '../helpers/tools.ts'
import { driveMixedTraffic } from '../helpers/traffic.ts'

t.test('promtool check metrics finds nothing to report in a live scrape after traffic', async (t) => {
  const promtool = findTool(t, 'promtool')
  if (promtool === undefined) return
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const sent = await driveMixedTraffic(proxy.url)
  await proxy.waitForRequests(sent)
  const text = await proxy.scrapeText()
  t.match(text, /llm_inter_token_latency_seconds_bucket/, 'the scrape holds the traffic')
  const lint = run(promtool, ['check', 'metrics'], text)
  t.equal(lint.output, '', 'no lint findings')
  t.equal(lint.status, 0, 'promtool exits 0')
})
