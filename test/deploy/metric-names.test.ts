import t from 'tap'
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'
import { repoPath } from '../helpers/paths.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { driveMixedTraffic } from '../helpers/traffic.ts'
import { eventually } from '../helpers/eventually.ts'
import { driveRealtimeSession } from '../helpers/realtime.ts'

const DEPLOY = repoPath('deploy')
const RULES_DIR = join(DEPLOY, 'prometheus/rules')
const DASHBOARDS_DIR = join(DEPLOY, 'grafana/dashboards')

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'inf', 'nan', 'atan2'])
/** Series Prometheus makes itself for every target. */
const SYNTHETIC = new Set(['up', 'scrape_duration_seconds', 'scrape_samples_scraped'])

/** The metric names a PromQL expression (or Grafana query with $variables) selects. */
function metricNames(expr: string): string[] {
  const cleaned = expr
    .replace(/#[^\n]*/g, ' ') // comments
    .replace(/\$\{?\w+\}?/g, '5m') // Grafana variables ($__rate_interval, $provider, ${datasource})
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ') // label lists
    .replace(/"(?:[^"\\]|\\.)*"/g, ' ') // string arguments
  const names = new Set<string>()
  for (const m of cleaned.matchAll(/(?<![\w.:])[a-zA-Z_:][a-zA-Z0-9_:]*(?!\s*\()/g)) {
    // A name followed by "(" is a function, not a metric; the lookahead may stop mid-word, so re-check.
    const rest = cleaned.slice((m.index ?? 0) + m[0].length)
    if (/^[\w:]/.test(rest)) continue
    if (!KEYWORDS.has(m[0].toLowerCase())) names.add(m[0])
  }
  return [...names]
}

interface RuleFile {
  groups: { name: string; rules: { record?: string; alert?: string; expr: string }[] }[]
}
interface Panel {
  type?: string
  title?: string
  targets?: { expr?: string }[]
  panels?: Panel[]
}
interface Dashboard {
  panels: Panel[]
  templating: { list: { name: string; type: string; query?: string | { query: string } }[] }
}

const rules = readdirSync(RULES_DIR)
  .filter((f) => f.endsWith('.yaml'))
  .flatMap((f) => (parse(readFileSync(join(RULES_DIR, f), 'utf8')) as RuleFile).groups.flatMap((g) => g.rules.map((r) => ({ where: `${f}: ${r.record ?? r.alert}`, expr: r.expr, record: r.record }))))
const recorded = new Set(rules.map((r) => r.record).filter((r): r is string => r !== undefined))

const dashboardExprs: { where: string; expr: string }[] = []
for (const f of readdirSync(DASHBOARDS_DIR).filter((f) => f.endsWith('.json'))) {
  const d = JSON.parse(readFileSync(join(DASHBOARDS_DIR, f), 'utf8')) as Dashboard
  const walk = (panels: Panel[]): void => {
    for (const p of panels) {
      for (const target of p.targets ?? []) if (target.expr !== undefined) dashboardExprs.push({ where: `${f}: ${p.title}`, expr: target.expr })
      walk(p.panels ?? [])
    }
  }
  walk(d.panels)
  for (const v of d.templating.list) {
    if (v.type !== 'query') continue
    const query = typeof v.query === 'string' ? v.query : (v.query?.query ?? '')
    // label_values(selector, label): the selector names the metric, the label is not one.
    const m = /^label_values\((.*),\s*\w+\)$/.exec(query)
    dashboardExprs.push({ where: `${f}: $${v.name}`, expr: m === null ? query : m[1] })
  }
}

t.test('the PromQL name extractor finds metrics and skips functions, labels, keywords and durations', async (t) => {
  t.same(metricNames('histogram_quantile(0.99, sum by (le, provider) (rate(llm_x_bucket{model=~"$model", a="b c"}[$__rate_interval]))) > 0.1 # THRESHOLD'), ['llm_x_bucket'])
  t.same(metricNames('sum(rate(a_total[5m])) / ignoring (source) group_left sum(rate(b_total[1m] offset 5m)) and on (x) c:d:e'), ['a_total', 'b_total', 'c:d:e'])
  t.same(metricNames('absent(up{job="tokentap"}) or vector(1e-9)'), ['up'])
})

t.test('the dashboard row Conditions shows prompt and output length, concurrency and the length bands', async (t) => {
  const d = JSON.parse(readFileSync(join(DASHBOARDS_DIR, 'tokentap.json'), 'utf8')) as Dashboard
  const start = d.panels.findIndex((p) => p.type === 'row' && p.title === 'Conditions')
  t.ok(start >= 0, 'the dashboard has a row Conditions')
  const next = d.panels.findIndex((p, i) => i > start && p.type === 'row')
  const row = d.panels.slice(start + 1, next === -1 ? undefined : next)
  const exprs = row.flatMap((p) => (p.targets ?? []).map((target) => target.expr ?? ''))
  t.ok(row.length >= 4, `${row.length} panels in the row`)
  for (const family of [
    'llm_request_input_tokens_bucket',
    'llm_request_output_tokens_bucket',
    'llm_concurrent_requests_bucket',
    'llm_inter_token_latency_seconds_bucket',
    'llm_time_per_output_token_seconds_bucket',
  ]) {
    t.ok(
      exprs.some((e) => metricNames(e).includes(family)),
      `the row queries ${family}`,
    )
  }
  t.ok(
    exprs.some((e) => /sum by \(le, length_band\) \(rate\(llm_inter_token_latency_seconds_bucket/.test(e)),
    'ITL quantiles by length_band',
  )
  t.ok(
    exprs.some((e) => /sum by \(le, length_band\) \(rate\(llm_time_per_output_token_seconds_bucket/.test(e)),
    'TPOT quantiles by length_band',
  )
})

t.test('with metrics.length_band_label the ITL and TPOT series the Conditions row reads carry length_band', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], metrics: { length_band_label: true } })
  t.teardown(() => proxy.close())
  const sent = await driveMixedTraffic(proxy.url)
  await proxy.waitForRequests(sent)
  const samples = await proxy.scrape()
  // Every request of the mix has at most 7 output tokens (2 + 1 + 3 + 1): all short (< 64).
  for (const name of ['llm_inter_token_latency_seconds_count', 'llm_time_per_output_token_seconds_count']) {
    const bands = [...new Set(samples.filter((s) => s.name === name).map((s) => s.labels.length_band))]
    t.same(bands, ['short'], `${name} is labelled length_band="short" only`)
  }
})

t.test('every metric the dashboard and the rules use exists in a real scrape after traffic', async (t) => {
  // The route has an SLO so llm_slo_requests_total reports too.
  // A budget of one label set, so a request for a second model is folded and llm_label_sets_folded_total reports too.
  const proxy = await startProxy({ routes: [{ ...simRoute(), slo: { ttft_seconds: 5 } }], limits: { max_label_sets: 1 }, log: { level: 'warn' } })
  t.teardown(() => proxy.close())
  const sent = await driveMixedTraffic(proxy.url)
  await (await fetch(`${proxy.url}/sim/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ model: 'a-second-model', messages: [] }) })).text()
  await driveRealtimeSession(proxy.url)
  // Recorded on close: wait for the last request to show up.
  const samples = await eventually(
    'six requests and the realtime session in the scrape',
    () => proxy.scrape(),
    (s) => s.filter((x) => x.name === 'llm_requests_total').reduce((n, x) => n + x.value, 0) >= sent + 1 && s.some((x) => x.name === 'llm_realtime_sessions_total'),
  )
  const scraped = new Set(samples.map((s) => s.name))
  // A native histogram's series has the family's own name (the quantile panels ask for it first).
  const histograms = new Set(Array.from((await proxy.scrapeText()).matchAll(/^# TYPE (\S+) histogram$/gm), (m) => m[1]))

  t.ok(dashboardExprs.length >= 20, `${dashboardExprs.length} dashboard queries`)
  t.ok(rules.length >= 20, `${rules.length} rules`)
  const used = new Map<string, string>()
  for (const { where, expr } of [...rules, ...dashboardExprs]) {
    const names = metricNames(expr)
    t.ok(names.length > 0, `${where} uses a metric`)
    for (const n of names) if (!used.has(n)) used.set(n, where)
  }
  for (const [name, where] of used) {
    if (name.includes(':')) t.ok(recorded.has(name), `${name} (${where}) is a shipped recording rule`)
    else if (SYNTHETIC.has(name)) t.pass(`${name} (${where}) is made by Prometheus`)
    else if (!scraped.has(name) && histograms.has(name)) t.pass(`${name} (${where}) is a histogram family, its native series`)
    else t.ok(scraped.has(name), `${name} (${where}) is in the scrape`)
  }
  // The dashboard shows the families the issue asks for.
  const all = dashboardExprs.map((d) => d.expr).join('\n')
  for (const family of [
    'llm_time_to_first_token_seconds_bucket',
    'llm_inter_token_latency_seconds_bucket',
    'llm_time_per_output_token_seconds_bucket',
    'llm_output_tokens_per_second_bucket',
    'llm_output_tokens_total',
    'llm_requests_total',
    'llm_requests_in_flight',
    'llm_realtime_sessions_total',
    'llm_realtime_audio_underrun_seconds_bucket',
    'llm_realtime_time_to_first_audio_seconds_bucket',
  ]) {
    t.ok(all.includes(family), `the dashboard queries ${family}`)
  }
  t.match(all, /sum by \(source\)/, 'the dashboard shows the token source share')
})
