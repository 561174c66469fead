import t from 'tap'
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'
import { budgetRules } from '../../src/cost/budgets.ts'
import { loadConfig } from '../../src/config/load-config.ts'
import { distPath, repoPath } from '../helpers/paths.ts'
import { findTool, run } from '../helpers/tools.ts'

// The budget rules of the example config (config/cost-example.yaml), as `tokentap budgets` writes
// them: shipped in deploy/prometheus/budgets/ (not in rules/: budgets are each user's own), checked
// and unit-tested with promtool.

const DIR = repoPath('deploy', 'prometheus', 'budgets')
const RULES = join(DIR, 'tokentap-budgets.yaml')
const EXAMPLE = 'config/cost-example.yaml'
const testFiles = readdirSync(DIR).filter((f) => f.endsWith('.test.yaml'))

t.test('the shipped budget rules are what tokentap budgets writes for the example config', async (t) => {
  t.equal(readFileSync(RULES, 'utf8'), budgetRules(loadConfig(repoPath(EXAMPLE), {}), EXAMPLE), 'regenerate with: node dist/src/bin.js budgets --config config/cost-example.yaml')
  const r = spawnSync(process.execPath, [distPath('src/bin.js'), 'budgets', '--config', EXAMPLE], { cwd: repoPath(), encoding: 'utf8' })
  t.same([r.status, r.stderr, r.stdout], [0, '', readFileSync(RULES, 'utf8')], 'the command prints them to stdout')
  const none = spawnSync(process.execPath, [distPath('src/bin.js'), 'budgets', '--config', 'config/default.yaml'], { cwd: repoPath(), encoding: 'utf8' })
  t.same([none.status, none.stdout, none.stderr], [1, '', "tokentap: 'budgets' is empty in config/default.yaml: no rules to write\n"], 'a config without budgets: one line, exit 1')
  const bogus = spawnSync(process.execPath, [distPath('src/bin.js'), 'budgets', '--out', 'x'], { cwd: repoPath(), encoding: 'utf8' })
  t.equal(bogus.status, 2, 'an unknown flag is a usage error')
  t.match(bogus.stderr, /^tokentap: budgets: Unknown option '--out'\n/)
  const help = spawnSync(process.execPath, [distPath('src/bin.js'), 'budgets', '--help'], { cwd: repoPath(), encoding: 'utf8' })
  t.same([help.status, /tokentap budgets \[--config FILE\]/.test(help.stdout)], [0, true], '--help prints the usage')
  const bad = spawnSync(process.execPath, [distPath('src/bin.js'), 'budgets', '--config', '/no/such.yaml'], { cwd: repoPath(), encoding: 'utf8' })
  t.same([bad.status, bad.stderr.split('\n').length], [1, 2], 'a config that does not load: one line, exit 1')
})

t.test('each budget is a recording rule of its amount, and each dimension and period has its two alerts', async (t) => {
  const groups = (parse(readFileSync(RULES, 'utf8')) as { groups: { name: string; rules: { record?: string; alert?: string; expr: string; labels?: Record<string, string> }[] }[] }).groups
  const rules = groups.flatMap((g) => g.rules)
  t.same(
    rules.filter((r) => r.record?.includes(':llm_budget:')).map((r) => [r.record, r.expr, r.labels]),
    [
      ['tenant:llm_budget:daily', 'vector(5)', { tenant: 'team-b', currency: 'USD' }],
      ['tenant:llm_budget:monthly', 'vector(100)', { tenant: 'team-a', currency: 'USD' }],
      ['route:llm_budget:daily', 'vector(20)', { route: '/openai', currency: 'USD' }],
      ['route:llm_budget:daily', 'vector(15)', { route: '/anthropic', currency: 'USD' }],
      ['route:llm_budget:monthly', 'vector(300)', { route: '/anthropic', currency: 'USD' }],
    ],
  )
  t.same(
    rules.flatMap((r) => (r.alert === undefined ? [] : [r.alert])),
    [
      'LLMTenantDailyBudgetExceeded',
      'LLMTenantDailyBudgetOnTrackToExceed',
      'LLMTenantMonthlyBudgetExceeded',
      'LLMTenantMonthlyBudgetOnTrackToExceed',
      'LLMRouteDailyBudgetExceeded',
      'LLMRouteDailyBudgetOnTrackToExceed',
      'LLMRouteMonthlyBudgetExceeded',
      'LLMRouteMonthlyBudgetOnTrackToExceed',
    ],
  )
  for (const r of rules) if (r.record !== undefined || r.alert !== undefined) t.notMatch(r.expr, /\[30d\]/, `${r.record ?? r.alert}: no 30-day range over the raw counters`)
})

t.test('promtool accepts the budget rules, and its unit tests make every budget alert fire and stay quiet', async (t) => {
  const promtool = findTool(t, 'promtool')
  if (promtool === undefined) return
  const check = run(promtool, ['check', 'rules', RULES])
  t.equal(check.status, 0, 'promtool check rules exits 0', { output: check.output })
  t.notMatch(check.output, /FAILED|WARNING/)
  // One file at a time, with room: the 30-day subqueries make each take tens of seconds on a loaded machine.
  for (const f of testFiles) {
    const r = spawnSync(promtool, ['test', 'rules', f], { cwd: DIR, encoding: 'utf8', timeout: 600_000 })
    const output = `${r.stdout ?? ''}${r.stderr ?? ''}`
    t.equal(r.status, 0, `promtool test rules ${f} exits 0`, { output })
    t.notMatch(output, /FAILED/)
  }
  const alerts = (parse(readFileSync(RULES, 'utf8')) as { groups: { rules: { alert?: string }[] }[] }).groups.flatMap((g) => g.rules.flatMap((x) => (x.alert === undefined ? [] : [x.alert])))
  const cases = testFiles.flatMap((f) =>
    (parse(readFileSync(join(DIR, f), 'utf8')) as { tests: { alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[] }).tests.flatMap((g) => g.alert_rule_test ?? []),
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
