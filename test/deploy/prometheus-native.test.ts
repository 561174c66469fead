import t from 'tap'
import OpenAI from 'openai'
import { simPlan, startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import type { Test } from 'tap'
import type { AddressInfo } from 'node:net'
import { deserialize, serialize } from 'node:v8'
import pino from 'pino'
import { buildAdmin } from '../../src/admin/admin.ts'
import { ClusterMetrics, StateReporter } from '../../src/cluster/metrics.ts'
import type { WorkerMetrics } from '../../src/cluster/metrics.ts'
import { startPrometheus } from '../helpers/prometheus-process.ts'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { repoPath } from '../helpers/paths.ts'
import { findTool } from '../helpers/tools.ts'
import { Received, VirtualClock, play, startHeldSimulator, watchedFetch } from '../helpers/virtual-time.ts'

// The tail of the user run that classic buckets misread (a 1.3 s P99 read as 1.75 s): token-
// weighted, 90 % of the gaps 20 ms (some as chunks of 2 tokens after 40 ms), 5 % 150 ms, 3 %
// 600 ms, 2 % stalls of 1.3 s. 100 observations a stream, in a fixed shuffled order.
const SHAPE: [gapMs: number, tokens: number, times: number][] = [
  [20, 1, 70],
  [40, 2, 10],
  [150, 1, 5],
  [600, 1, 3],
  [1300, 1, 2],
]
const STREAMS = 4
const QUANTILES = [0.5, 0.925, 0.965, 0.99] as const
/** One schema-3 bucket: a quantile read from native buckets lies within this factor of the truth. */
const BUCKET = 2 ** (1 / 8)

/** A seeded shuffle (mulberry32), so every run plays the same order. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items]
  let a = seed
  const next = (): number => {
    a = (a + 0x6d2b79f5) | 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1))
    ;[out[i], out[j]] = [out[j], out[i]]
  }
  return out
}

const chunksOf = (seed: number): [number, number][] =>
  shuffled(
    SHAPE.flatMap(([gap, k, n]) => Array.from({ length: n }, () => [gap, k] as [number, number])),
    seed,
  )

/** The exact token-weighted quantile (nearest rank) of the ITL observations the chunks make: k of g/k each. */
function exactQuantile(streams: readonly [number, number][][], q: number): number {
  const values = streams.flatMap((chunks) => chunks.flatMap(([gap, k]) => Array.from({ length: k }, () => gap / 1000 / k))).sort((a, b) => a - b)
  return values[Math.ceil(q * values.length) - 1]
}

/**
 * Where Prometheus scrapes: the proxy's own admin listener, or with `workers: 2` an admin listener
 * whose /metrics is the cluster primary's ClusterMetrics over the two proxies' metric states,
 * passed through the structured clone of the cluster channel (v8 serialize), as cluster.ts does.
 * Two proxies in this process stand for the two workers, so both read the one virtual clock.
 */
async function scrapeTarget(t: Test, proxies: readonly RunningProxy[]): Promise<string> {
  if (proxies.length === 1) return new URL(proxies[0].adminUrl).host
  const metrics = new ClusterMetrics(async () => ({
    reports: await Promise.all(
      proxies.map(
        async (p) =>
          deserialize(serialize({ families: new StateReporter().report(p.app.tokentap.registry.families, undefined).families, process: await p.app.tokentap.registry.processJson() })) as WorkerMetrics,
      ),
    ),
    workerIds: proxies.map((_, i) => i + 1),
  }))
  const admin = buildAdmin({ config: proxies[0].config, logger: pino({ level: 'silent' }), registry: metrics, draining: false, now: () => 0 })
  t.teardown(() => admin.close())
  await admin.listen({ host: '127.0.0.1', port: 0 })
  return `127.0.0.1:${(admin.server.address() as AddressInfo).port}`
}

for (const workers of [1, 2]) {
  t.test(`a real Prometheus with native histograms reads every ITL quantile within one schema-3 bucket of the exact token-weighted value (workers: ${workers})`, async (t) => {
    const prometheus = findTool(t, 'prometheus')
    if (prometheus === undefined) return
    const clock = new VirtualClock()
    const sim = await startHeldSimulator()
    t.teardown(() => sim.close())
    const proxies: RunningProxy[] = []
    for (let i = 0; i < workers; i++) {
      const proxy = await startProxy({ routes: [{ prefix: '/sim', upstream: sim.url }] }, { now: clock.now })
      t.teardown(() => proxy.close())
      proxies.push(proxy)
    }
    const rulesDir = repoPath('deploy', 'prometheus', 'rules')
    const ruleFiles = readdirSync(rulesDir)
      .filter((f) => f.endsWith('.yaml'))
      .map((f) => join(rulesDir, f))
    const server = await startPrometheus(prometheus, [await scrapeTarget(t, proxies)], { features: ['native-histograms'], ruleFiles })
    t.teardown(() => server.close())
    t.equal(await server.waitFor('the tokentap target to be up', () => server.number('up{job="tokentap"} == 1')), 1, 'Prometheus scrapes tokentap')

    const received = new Received()
    const clients = proxies.map((proxy) => new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test', fetch: watchedFetch(received) }))
    const played: [number, number][][] = []
    const stream = async (seed: number): Promise<void> => {
      // The streams take turns between the workers.
      const proxy = proxies[seed % proxies.length]
      const client = clients[seed % proxies.length]
      const chunks = chunksOf(seed)
      played.push(chunks)
      const reading = (async () => {
        const s = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [], stream: true }, simPlan({ ttft_ms: 10, first_tokens: 1, chunks }))
        for await (const _ of s) void _
      })()
      await play(proxy, clock, sim, received)
      await reading
    }
    // The first stream makes the series; once Prometheus has it, rate() sees the rest arrive.
    await stream(1)
    const selector = 'llm_inter_token_latency_seconds{job="tokentap"}'
    await server.waitFor('the first stream to be scraped', () => server.number(`histogram_count(sum(${selector})) == 100`))
    for (let seed = 2; seed <= STREAMS; seed++) await stream(seed)
    const all = STREAMS * 100
    t.equal(
      await server.waitFor('every observation to be scraped', () => server.number(`histogram_count(sum(${selector})) == ${all}`)),
      all,
      `Prometheus holds all ${all} token-weighted ITL observations`,
    )
    t.same(await server.query('llm_inter_token_latency_seconds_bucket{job="tokentap"}'), [], 'Prometheus 2.x keeps only the native series of a histogram it scraped natively')

    for (const q of QUANTILES) {
      const exact = exactQuantile(played, q)
      const total = await server.number(`histogram_quantile(${q}, sum(${selector}))`)
      t.ok(total !== undefined && total / exact <= BUCKET && exact / total <= BUCKET, `P${q * 100} over everything: ${total} within a bucket of the exact ${exact}`)
      // The dashboard's form: the streams after the first (the same shape), as a rate.
      const later = exactQuantile(played.slice(1), q)
      const rated = await server.number(`histogram_quantile(${q}, sum by (model) (rate(${selector}[1m])))`)
      t.ok(rated !== undefined && rated / later <= BUCKET && later / rated <= BUCKET, `P${q * 100} of the rate: ${rated} within a bucket of the exact ${later}`)
    }
    // The shipped recording rules read the native histogram first: the same answer, from the rule.
    const later = exactQuantile(played.slice(1), 0.99)
    const recorded = await server.waitFor('the recorded P99 ITL', () => server.number('provider_model:llm_inter_token_latency_seconds:p99_5m{provider="openai",model="gpt-4o-mini"}'))
    t.ok(recorded / later <= BUCKET && later / recorded <= BUCKET, `the recording rule's P99 ITL ${recorded} is within a bucket of the exact ${later}`)
    const mean = await server.waitFor('the mean TPOT rule', () => server.number('route_model:vllm_request_tpot_seconds:mean_5m'))
    // Every stream's TPOT is its gaps' total over its tokens after the first.
    const tpot = SHAPE.reduce((a, [gap, , n]) => a + gap * n, 0) / 1000 / SHAPE.reduce((a, [, k, n]) => a + k * n, 0)
    t.ok(Math.abs(mean - tpot) < 1e-9, `the mean rules read histogram_sum / histogram_count of the native histogram: ${mean} = ${tpot}`)
    t.same(await server.unhealthyRules(), [], 'every shipped rule evaluates with health ok against native histograms')
  })
}
