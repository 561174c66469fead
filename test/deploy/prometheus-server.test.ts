import t from 'tap'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { repoPath } from '../helpers/paths.ts'
import { startPrometheus } from '../helpers/prometheus-process.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { findTool } from '../helpers/tools.ts'

const RULES_DIR = repoPath('deploy', 'prometheus', 'rules')
const ruleFiles = readdirSync(RULES_DIR)
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => join(RULES_DIR, f))

// The known cadence: after the first token, one chunk of 16 tokens 2800 ms later, so every
// token-weighted ITL observation is 2800/16 = 175 ms. A chunk late (or the first one late, which
// shortens the gap) by up to ±400 ms keeps it inside the same bucket, (0.15, 0.2] with the
// default buckets: a loaded machine can freeze the process for a few hundred ms, and one late
// chunk's k observations would be more than the 1 % above the P99.
const TOKENS_PER_CHUNK = 16
const GAP_MS = 2800
const CHUNKS = 1
const TRUE_ITL = GAP_MS / 1000 / TOKENS_PER_CHUNK
const PLAN = { ttft_ms: 20, chunks: Array.from({ length: CHUNKS }, () => [GAP_MS, TOKENS_PER_CHUNK]) }

t.test('a real Prometheus scraping tokentap reads back P99 ITL in the bucket of the true value, and loads the shipped rules', async (t) => {
  const prometheus = findTool(t, 'prometheus')
  if (prometheus === undefined) return
  const proxy = await startProxy({ routes: [simRoute()], log: { level: 'warn' } })
  t.teardown(() => proxy.close())

  const server = await startPrometheus(prometheus, [new URL(proxy.adminUrl).host], { ruleFiles })
  t.teardown(() => server.close())
  const { number, waitFor } = server
  t.equal(await waitFor('the tokentap target to be up', () => number('up{job="tokentap"} == 1')), 1, 'Prometheus scrapes tokentap')

  const stream = async (): Promise<void> => {
    const res = await fetch(`${proxy.url}/sim/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(PLAN) },
      body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    })
    await res.text()
  }
  // One request makes the series exist; Prometheus scrapes it before the rest, so rate() sees them.
  await stream()
  await waitFor('the first request to be scraped', () => number('sum(llm_requests_total{job="tokentap"}) > 0'))
  for (let round = 0; round < 2; round++) await Promise.all(Array.from({ length: 6 }, stream))

  const itl: readonly number[] = DEFAULT_BUCKETS.itl
  const upper = itl.find((b) => b >= TRUE_ITL) as number
  const lower = itl[itl.indexOf(upper) - 1]
  const p99 = await waitFor('the P99 ITL', () => number('histogram_quantile(0.99, sum by (le) (rate(llm_inter_token_latency_seconds_bucket{job="tokentap"}[1m])))'))
  t.ok(p99 > lower && p99 <= upper, `P99 ITL ${p99} lies in (${lower}, ${upper}], the bucket of the true ${TRUE_ITL}`)
  const recorded = await waitFor('the recorded P99 ITL', () => number('provider_model:llm_inter_token_latency_seconds:p99_5m{provider="openai",model="gpt-4o-mini"}'))
  t.ok(recorded > lower && recorded <= upper, `the recording rule's P99 ITL ${recorded} lies in the same bucket`)
  const want = 13 * CHUNKS * TOKENS_PER_CHUNK
  const count = await waitFor('every observation to be scraped', () => number(`sum(llm_inter_token_latency_seconds_count{job="tokentap"}) == ${want}`), 10_000)
  t.equal(count, want, `Prometheus holds every ITL observation (13 requests × ${CHUNKS} chunk × ${TOKENS_PER_CHUNK} tokens)`)

  const rules = (await (await fetch(`${server.api}/rules`)).json()) as { data: { groups: { name: string; rules: { name: string; health: string; lastError?: string }[] }[] } }
  const loaded = rules.data.groups.flatMap((g) => g.rules)
  t.same(rules.data.groups.map((g) => g.name).sort(), ['tokentap-alerts', 'tokentap-other-tools', 'tokentap-recording', 'tokentap-slo', 'tokentap-slo-alerts'], 'every rule group is loaded')
  t.ok(loaded.length >= 20, `${loaded.length} rules are loaded`)
  t.same(
    loaded.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.health} ${r.lastError ?? ''}`),
    [],
    'every rule evaluates with health ok',
  )
})
