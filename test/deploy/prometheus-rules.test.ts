import t from 'tap'
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parse, stringify } from 'yaml'
import { repoPath } from '../helpers/paths.ts'
import { findTool, run } from '../helpers/tools.ts'

const PROM_DIR = repoPath('deploy', 'prometheus')
const ruleFiles = readdirSync(join(PROM_DIR, 'rules'))
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => join(PROM_DIR, 'rules', f))
const testFiles = readdirSync(join(PROM_DIR, 'tests'))
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => join(PROM_DIR, 'tests', f))

t.test('promtool check rules accepts every shipped rule file', async (t) => {
  const promtool = findTool(t, 'promtool')
  if (promtool === undefined) return
  t.ok(ruleFiles.length >= 2, 'recording and alerting rule files are shipped')
  const r = run(promtool, ['check', 'rules', ...ruleFiles])
  t.equal(r.status, 0, 'promtool check rules exits 0', { output: r.output })
  t.notMatch(r.output, /FAILED|WARNING/)
})

t.test('promtool test rules passes the unit tests, which make every alert fire and stay quiet', async (t) => {
  const promtool = findTool(t, 'promtool')
  if (promtool === undefined) return
  t.ok(testFiles.length >= 2, 'recording and alerting rules have unit tests')
  const r = run(promtool, ['test', 'rules', ...testFiles], undefined, join(PROM_DIR, 'tests'))
  t.equal(r.status, 0, 'promtool test rules exits 0', { output: r.output })
  t.notMatch(r.output, /FAILED/)
  // Every alert has a test where it fires and one where it does not.
  const alerts = ruleFiles.flatMap((f) =>
    (parse(readFileSync(f, 'utf8')) as { groups: { rules: { alert?: string }[] }[] }).groups.flatMap((g) => g.rules.map((r) => r.alert).filter((a): a is string => a !== undefined)),
  )
  const cases = testFiles.flatMap((f) =>
    (parse(readFileSync(f, 'utf8')) as { tests: { alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[] }).tests.flatMap((g) => g.alert_rule_test ?? []),
  )
  for (const alert of alerts) {
    t.ok(
      cases.some((c) => c.alertname === alert && c.exp_alerts.length > 0),
      `${alert} has a test where it fires`,
    )
    t.ok(
      cases.some((c) => c.alertname === alert && c.exp_alerts.length === 0),
      `${alert} has a test where it stays quiet`,
    )
  }
})

t.test('promtool check config accepts the Kubernetes scrape config with the shipped rules', async (t) => {
  const promtool = findTool(t, 'promtool')
  if (promtool === undefined) return
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-promcfg-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  cpSync(join(PROM_DIR, 'rules'), join(dir, 'rules'), { recursive: true })
  const text = readFileSync(join(PROM_DIR, 'prometheus.yml'), 'utf8')
  writeFileSync(join(dir, 'prometheus.yml'), text)
  let r = run(promtool, ['check', 'config', join(dir, 'prometheus.yml')])
  if (r.status !== 0 && /kubernetes_sd_configs not found/.test(r.output)) {
    // Debian builds Prometheus without Kubernetes service discovery: check everything else.
    t.comment('this promtool has no Kubernetes service discovery; checking the config with static targets in its place')
    const config = parse(text) as { scrape_configs: Record<string, unknown>[] }
    for (const job of config.scrape_configs) {
      if (job.kubernetes_sd_configs === undefined) continue
      delete job.kubernetes_sd_configs
      job.static_configs = [{ targets: ['127.0.0.1:9464'] }]
    }
    writeFileSync(join(dir, 'prometheus.yml'), stringify(config))
    r = run(promtool, ['check', 'config', join(dir, 'prometheus.yml')])
  }
  t.equal(r.status, 0, 'promtool check config exits 0', { output: r.output })
  t.match(r.output, new RegExp(`SUCCESS: ${ruleFiles.length} rule files found`), 'the rule files are found and valid')
})
