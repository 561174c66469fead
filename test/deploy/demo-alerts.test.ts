import t from 'tap'
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parse, stringify } from 'yaml'
import { validateConfig } from '../../src/config/load-config.ts'
import type { SimulatorConfig } from '../../src/config/schema.ts'
import { planFor } from '../../src/sim/schedule.ts'
import type { SimPlanRequest } from '../../src/sim/schedule.ts'
import { repoPath } from '../helpers/paths.ts'
import { findTool, run } from '../helpers/tools.ts'

const compose = validateConfig(parse(readFileSync(repoPath('deploy', 'compose', 'tokentap.yaml'), 'utf8')))
const demo = compose.routes.find((r) => r.simulator !== undefined)?.simulator as SimulatorConfig
/** Requests of the compose load: max_tokens from 32 to 231 (its `32 + random · 200`), spread evenly. */
const REQUESTS = 400
const maxTokensOf = (i: number): number => 32 + ((i * 37) % 200)

/** The waits of the plans the simulator makes for the compose load's requests (seq as it counts). */
function plans(cfg: SimulatorConfig, request?: SimPlanRequest): { afterMs: number; tokens: number }[][] {
  return Array.from({ length: REQUESTS }, (_, i) => [...planFor(cfg, maxTokensOf(i), request, i).chunks])
}

/** Token-weighted ITL observations (k of g/k for each chunk after the first), in seconds. */
const itlOf = (chunks: { afterMs: number; tokens: number }[][]): number[] =>
  chunks.flatMap((c) => c.slice(1).flatMap(({ afterMs, tokens }) => Array.from({ length: tokens }, () => afterMs / 1000 / tokens)))

t.test('the simulator\u2019s own defaults stall: now and then a gap longer than the default metrics.stall_seconds', async (t) => {
  const defaults = validateConfig({ routes: [{ prefix: '/sim', simulator: {} }] })
  const sim = defaults.routes[0].simulator as SimulatorConfig
  t.ok(sim.stall_ms > defaults.metrics.stall_seconds * 1000, `stall_ms ${sim.stall_ms} > stall_seconds ${defaults.metrics.stall_seconds} s`)
  const withStall = Array.from({ length: 100 }, (_, i) => planFor(sim, undefined, undefined, i)).filter((p) => p.chunks.slice(1).some((c) => c.afterMs > defaults.metrics.stall_seconds * 1000)).length
  t.ok(withStall > 0 && withStall < 50, `${withStall} of 100 default requests stall: occasionally`)
  // The compose demo keeps those defaults.
  t.equal(demo.stall_ms, sim.stall_ms)
  t.equal(demo.stall_probability, sim.stall_probability)
  const gaps = plans(demo).flatMap((c) => c.slice(1))
  const stalls = gaps.filter((c) => c.afterMs > compose.metrics.stall_seconds * 1000).length
  t.ok(stalls > 0, `the compose load's ${REQUESTS} requests hold ${stalls} stalls: llm_stream_stalls_total counts`)
})

t.test('with the compose traffic TokentapInterTokenLatencyHigh stays quiet, and with the simulator\u2019s `slow` switch (SIM_SLOW=8) it fires (promtool)', async (t) => {
  const promtool = findTool(t, 'promtool')
  if (promtool === undefined) return
  const bounds = compose.metrics.buckets.itl
  // The load service's switch: SIM_SLOW in docker-compose.yaml becomes the x-tokentap-sim header's `slow`.
  const load = readFileSync(repoPath('deploy', 'compose', 'docker-compose.yaml'), 'utf8')
  t.match(load, /'x-tokentap-sim': JSON\.stringify\(\{ slow \}\)/, 'the compose load sends `slow` from SIM_SLOW')
  const series: { series: string; values: string }[] = []
  for (const [model, request] of [
    ['normal', undefined],
    ['slow', { slow: 8 }],
  ] as const) {
    const itl = itlOf(plans(demo, request))
    // A minute of traffic is these requests; Prometheus sees the cumulative buckets grow by that each minute.
    for (const le of [...bounds.map(String), '+Inf']) {
      const count = le === '+Inf' ? itl.length : itl.filter((v) => v <= Number(le)).length
      series.push({ series: `llm_inter_token_latency_seconds_bucket{job="tokentap",instance="a",provider="openai",model="${model}",route="/sim",le="${le}"}`, values: `0+${count}x30` })
    }
  }
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-demo-alerts-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const rulesDir = repoPath('deploy', 'prometheus', 'rules')
  writeFileSync(
    join(dir, 'demo.test.yaml'),
    stringify({
      rule_files: readdirSync(rulesDir)
        .filter((f) => f.endsWith('.yaml'))
        .map((f) => join(rulesDir, f)),
      evaluation_interval: '1m',
      tests: [
        {
          interval: '1m',
          input_series: series,
          promql_expr_test: [
            {
              expr: 'provider_model:llm_inter_token_latency_seconds:p99_5m < bool 0.1',
              eval_time: '20m',
              exp_samples: [
                { labels: '{provider="openai",model="normal"}', value: 1 },
                { labels: '{provider="openai",model="slow"}', value: 0 },
              ],
            },
            {
              expr: 'ALERTS{alertname="TokentapInterTokenLatencyHigh"}',
              eval_time: '20m',
              exp_samples: [{ labels: 'ALERTS{alertname="TokentapInterTokenLatencyHigh",alertstate="firing",severity="warning",provider="openai",model="slow"}', value: 1 }],
            },
          ],
        },
      ],
    }),
  )
  const r = run(promtool, ['test', 'rules', 'demo.test.yaml'], undefined, dir)
  t.equal(r.status, 0, 'promtool: P99 ITL under 0.1 s and no alert for the normal demo traffic; the slow one fires', { output: r.output })
})
