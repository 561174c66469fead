import type { AddressInfo } from 'node:net'
import { validateConfig } from '../../src/config/load-config.ts'
import type { SimulatorConfig } from '../../src/config/schema.ts'
import { buildSimulator } from '../../src/sim/sim-app.ts'
import type { SimPlanRequest } from '../../src/sim/schedule.ts'
import { simRoute } from './proxy.ts'
import type { RunningProxy } from './proxy.ts'
import { select, sumOf } from './prometheus.ts'

/**
 * Shared pieces of the provider end-to-end tests: a schedule the tests know, a simulator the
 * client can reach directly (to compare with what it gets through the proxy), and the metric
 * checks every streamed provider must pass.
 */

/** First chunk of 2 tokens after 40 ms, then [gap ms, tokens]: N = 9 in 5 chunks. */
export const FIRST_TOKENS = 2
export const GAPS: [number, number][] = [
  [30, 1],
  [30, 2],
  [40, 1],
  [30, 3],
]
export const N = FIRST_TOKENS + GAPS.reduce((n, [, k]) => n + k, 0)
export const PLAN: SimPlanRequest = { ttft_ms: 40, first_tokens: FIRST_TOKENS, chunks: GAPS }

/** The same simulator a `simRoute()` gets, listening on its own port: what a client sees without the proxy. */
export async function startDirectSim(): Promise<{ url: string; close(): Promise<void> }> {
  const route = simRoute()
  const cfg = validateConfig({ routes: [route] }).routes[0].simulator as SimulatorConfig
  const sim = buildSimulator(cfg)
  await sim.listen({ host: '127.0.0.1', port: 0 })
  return { url: `http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`, close: () => sim.close() }
}

/** Ids and timestamps that differ between two simulators by design (request sequence, clock). */
export function normalise(value: unknown): string {
  return JSON.stringify(value)
    .replace(/sim\d+/g, 'simN')
    .replace(/"created_at":\d+/g, '"created_at":0')
}

interface Check {
  ok(value: unknown, message: string): unknown
  equal(found: unknown, wanted: unknown, message: string): unknown
  same(found: unknown, wanted: unknown, message: string): unknown
}

/** The metrics every streamed request of the known plan must leave, `requests` times over. */
export async function checkStreamMetrics(t: Check, proxy: RunningProxy, labels: Record<string, string>, requests: number): Promise<void> {
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), requests, 'one TTFT per request')
  // These SDK runs use the real clock, so durations are not asserted (a loaded machine stretches
  // them, and one starved read can hold every event of a stream, so all its gaps are 0): only what
  // holds whatever the timing, the order TTFT + decode ≤ E2E and exact counts.
  // The exact figures of each provider's stream are asserted on virtual time in
  // e2e/stream-shape-providers.test.ts.
  const ttft = sumOf(m, 'llm_time_to_first_token_seconds_sum', labels)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), requests * (N - FIRST_TOKENS), 'ITL count = Σ (N − k1)')
  const itl = sumOf(m, 'llm_inter_token_latency_seconds_sum', labels)
  const e2e = sumOf(m, 'llm_request_duration_seconds_sum', { ...labels, outcome: 'ok' })
  t.ok(ttft > 0 && itl >= 0 && ttft + itl <= e2e + 1e-9, `TTFT ${ttft} s + decode ${itl} s within E2E ${e2e} s`)
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), requests * GAPS.length, 'one gap per chunk after the first')
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), requests * N, 'output tokens exact, from the provider usage')
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'estimate' }), 0, 'nothing estimated')
  t.ok(sumOf(m, 'llm_input_tokens_total', labels) >= requests, 'input tokens counted')
  t.equal(sumOf(m, 'llm_time_per_output_token_seconds_count', labels), requests, 'one TPOT per ok request')
  t.equal(sumOf(m, 'llm_output_tokens_per_second_count', labels), requests, 'per-user TPS once per ok request')
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200' }), requests, 'every request ok')
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
    'nothing left in flight',
  )
}
