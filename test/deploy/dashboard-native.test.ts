import t from 'tap'
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { repoPath } from '../helpers/paths.ts'
import { startPrometheus } from '../helpers/prometheus-process.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { driveRealtimeSession } from '../helpers/realtime.ts'
import { findTool } from '../helpers/tools.ts'
import { driveMixedTraffic } from '../helpers/traffic.ts'

interface Panel {
  title?: string
  targets?: { expr?: string }[]
  panels?: Panel[]
}

/** Every PromQL query of the dashboard, with the panel it belongs to. */
function dashboardQueries(): { where: string; expr: string }[] {
  const d = JSON.parse(readFileSync(repoPath('deploy', 'grafana', 'dashboards', 'tokentap.json'), 'utf8')) as { panels: Panel[] }
  const out: { where: string; expr: string }[] = []
  const walk = (panels: Panel[]): void => {
    for (const p of panels) {
      for (const target of p.targets ?? []) if (target.expr !== undefined) out.push({ where: `panel "${p.title}"`, expr: target.expr })
      walk(p.panels ?? [])
    }
  }
  walk(d.panels)
  return out
}

/** The README's P99 ITL query (the promql block after "P99 ITL by model"). */
function readmeP99(): string {
  const m = /P99 ITL by model[\s\S]*?```promql\n([\s\S]*?)```/.exec(readFileSync(repoPath('README.md'), 'utf8'))
  if (m === null) throw new Error('README.md: no P99 ITL query')
  return m[1].trim()
}

/** Grafana's variables as a query at "All" would send them: every value, and a 1 m rate window. */
const asGrafanaSends = (expr: string): string => expr.replace(/\$__\w+/g, '1m').replace(/\$\w+/g, '.*')

const MODES = [
  { name: 'with native histograms on Prometheus 2.x (only native series kept)', features: ['native-histograms'] },
  { name: 'with classic scraping (text format, only classic series)', features: [] },
]

for (const mode of MODES)
  t.test(`${mode.name}, every dashboard query, the README\u2019s P99 ITL query and the audio-underrun rule return data`, async (t) => {
    const prometheus = findTool(t, 'prometheus')
    if (prometheus === undefined) return
    // An SLO (llm_slo_requests_total) and the length bands: what the panels read exists.
    // pricing: the cost panels (gpt-4o-mini priced; the stalled stream's model is not, for the unpriced panel).
    const proxy = await startProxy({
      routes: [{ ...simRoute(), slo: { ttft_seconds: 5 } }],
      metrics: { length_band_label: true },
      pricing: { snapshot: false, models: { 'gpt-4o-mini': { input: 0.15, output: 0.6 } } },
      log: { level: 'warn' },
    })
    t.teardown(() => proxy.close())
    const rulesDir = repoPath('deploy', 'prometheus', 'rules')
    const ruleFiles = readdirSync(rulesDir)
      .filter((f) => f.endsWith('.yaml'))
      .map((f) => join(rulesDir, f))
    const server = await startPrometheus(prometheus, [new URL(proxy.adminUrl).host], { features: mode.features, ruleFiles })
    t.teardown(() => server.close())
    await server.waitFor('the tokentap target to be up', () => server.number('up{job="tokentap"} == 1'))

    // A stream with a gap over metrics.stall_seconds (1 s), so the stall panels have a series.
    const stalled = async (): Promise<void> => {
      const res = await fetch(`${proxy.url}/sim/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify({ ttft_ms: 5, chunks: [[1100, 1]] }) },
        body: JSON.stringify({ model: 'unpriced-model', stream: true, messages: [] }),
      })
      await res.text()
    }
    const round = async (): Promise<void> => {
      await driveMixedTraffic(proxy.url)
      await driveRealtimeSession(proxy.url)
      await stalled()
    }
    // The first round makes the series; once Prometheus has scraped them, rate() sees the second.
    await round()
    await server.waitFor('the first round to be scraped', () => server.number('sum(llm_requests_total) >= 6'))
    await round()
    await server.waitFor('the second round to be scraped', () => server.number('sum(llm_requests_total) >= 12'))
    const kept =
      mode.features.length > 0 ? ['llm_inter_token_latency_seconds', 'llm_inter_token_latency_seconds_bucket'] : ['llm_inter_token_latency_seconds_bucket', 'llm_inter_token_latency_seconds']
    t.not((await server.query(kept[0])).length, 0, `${kept[0]} is stored`)
    t.same(await server.query(kept[1]), [], `${kept[1]} is not: each query must answer from what this mode keeps`)

    const queries = [
      ...dashboardQueries(),
      { where: 'README.md P99 ITL by model', expr: readmeP99() },
      // The one recording rule that read classic buckets only (its alert: TokentapRealtimeAudioUnderrun).
      { where: 'rule', expr: 'provider_model:llm_realtime_audio_underrun_over_250ms:ratio_rate5m' },
    ]
    t.ok(queries.length >= 60, `${queries.length} queries`)
    const emptyNow = async (): Promise<string[]> => {
      const out: string[] = []
      for (const q of queries) if ((await server.query(asGrafanaSends(q.expr))).length === 0) out.push(`${q.where}: ${q.expr}`)
      return out
    }
    // The recording rules answer after an evaluation or two: ask again (a separate process sends no
    // event) until every query has data; the bound only ends a stuck run, and then names the empty ones.
    let empty = await emptyNow()
    for (const deadline = Date.now() + 60_000; empty.length > 0 && Date.now() < deadline; empty = await emptyNow()) await new Promise((r) => setTimeout(r, 250))
    t.same(empty, [], 'no query is empty')
  })
