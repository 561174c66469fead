import { stringify } from 'yaml'
import { TokentapError } from '../errors.ts'

/**
 * `budgets:` → Prometheus recording rules and alerts (`tokentap budgets --config FILE`): tokentap alerts, it never
 * blocks a request. Rolling windows, one recording rule per budget and one exceeded / on-track alert per dimension
 * and period (docs/cost.md, "Budgets").
 */

/** The two dimensions a budget applies to: the label it matches. */
const DIMENSIONS = ['tenant', 'route'] as const
type Dimension = (typeof DIMENSIONS)[number]
const PERIODS = ['daily', 'monthly'] as const
type Period = (typeof PERIODS)[number]

const invalid = (detail: string): TokentapError => new TokentapError('TOKENTAP_ERR_CONFIG_INVALID', detail)

/** One entry of `budgets:`. */
interface Budget {
  readonly tenant?: string
  readonly route?: string
  readonly daily?: number
  readonly monthly?: number
}

/**
 * What budgets read of a config (its schema: config/schema.ts, whose validation runs `checkBudgets`,
 * so cost/ names the shape instead of importing it).
 */
export interface BudgetSettings {
  readonly budgets: readonly Budget[]
  readonly routes: readonly { readonly prefix: string; readonly name?: string }[]
  readonly pricing?: { readonly currency: string }
  readonly metrics: { readonly tenant?: unknown }
}

/** The label value of a route a budget names by prefix or name, or undefined. */
function routeLabel(config: BudgetSettings, route: string): string | undefined {
  const r = config.routes.find((x) => x.name === route || x.prefix === route)
  return r === undefined ? undefined : (r.name ?? r.prefix)
}

/** What the schema cannot say about `budgets:`; run by validateConfig after the routes are normalised. */
export function checkBudgets(config: BudgetSettings): void {
  config.budgets.forEach((b, i) => {
    const key = `budgets[${i}]`
    if ((b.tenant === undefined) === (b.route === undefined))
      throw invalid(`'${key}' needs exactly one of 'tenant' or 'route'`)
    if (b.daily === undefined && b.monthly === undefined)
      throw invalid(`'${key}' needs 'daily' or 'monthly' (an amount in the pricing currency)`)
    if (config.pricing === undefined)
      throw invalid(`'${key}' needs 'pricing:' (budgets are amounts of the cost it works out)`)
    if (b.tenant !== undefined && config.metrics.tenant === undefined)
      throw invalid(`'${key}.tenant' needs 'metrics.tenant' (the tenant label)`)
    if (b.route !== undefined && routeLabel(config, b.route) === undefined)
      throw invalid(`'${key}.route' ${b.route} is no route's prefix or name`)
  })
}

interface Rule {
  record?: string
  alert?: string
  expr: string
  for?: string
  labels?: Record<string, string>
  annotations?: Record<string, string>
}

const SECONDS: Record<Period, number> = { daily: 86_400, monthly: 30 * 86_400 }

/** The recording rules of one dimension: burn rate and the windows' spend. */
function spendRules(d: Dimension): Rule[] {
  return [
    { record: `${d}:llm_cost:rate1h`, expr: `sum by (${d}, currency) (rate(llm_cost_total[1h]))` },
    { record: `${d}:llm_cost:increase1h`, expr: `sum by (${d}, currency) (increase(llm_cost_total[1h]))` },
    { record: `${d}:llm_cost:increase1d`, expr: `sum by (${d}, currency) (increase(llm_cost_total[1d]))` },
    // 720 hourly increases avoid a 30-day range over the raw series; 30 days less a minute gives 720 steps whether the
    // range's start is inclusive (Prometheus 2) or not (3).
    { record: `${d}:llm_cost:increase30d`, expr: `sum_over_time(${d}:llm_cost:increase1h[43199m:1h])` },
  ]
}

const spent = (d: Dimension, p: Period): string =>
  p === 'daily' ? `${d}:llm_cost:increase1d` : `${d}:llm_cost:increase30d`
/** The spend over the whole window at the current burn. */
const projected = (d: Dimension, p: Period): string =>
  p === 'daily' ? `${d}:llm_cost:rate1h * ${SECONDS.daily}` : `${d}:llm_cost:increase1d * 30`
const title = (s: string): string => s[0].toUpperCase() + s.slice(1)

function alertRules(d: Dimension, p: Period): Rule[] {
  const budget = `${d}:llm_budget:${p}`
  const on = `on (${d}, currency)`
  const over = `${spent(d, p)} > ${on} ${budget}`
  const name = `LLM${title(d)}${title(p)}Budget`
  const window = p === 'daily' ? 'the last 24 hours' : 'the last 30 days'
  return [
    {
      alert: `${name}Exceeded`,
      expr: over,
      labels: { severity: 'critical' },
      annotations: {
        summary: `${d} {{ $labels.${d} }} spent {{ $value | printf "%.2f" }} {{ $labels.currency }} in ${window}, over its ${p} budget`,
        description:
          'tokentap measures and alerts; it does not block requests. Enforce at a gateway or in the application (docs/cost.md).',
      },
    },
    {
      alert: `${name}OnTrackToExceed`,
      expr: `(${projected(d, p)} > ${on} ${budget}) unless ${on} (${over})`,
      for: p === 'daily' ? '15m' : '1h',
      labels: { severity: 'warning' },
      annotations: {
        summary: `${d} {{ $labels.${d} }} is on track to spend {{ $value | printf "%.2f" }} {{ $labels.currency }} over ${window} at its current burn, over its ${p} budget`,
        description:
          'The burn is the last hour (daily budgets) or the last day (monthly budgets), extrapolated to the window.',
      },
    },
  ]
}

/** The rules file for a validated config's budgets (YAML, for Prometheus' `rule_files`). */
export function budgetRules(config: BudgetSettings, source: string): string {
  const currency = config.pricing?.currency ?? 'USD'
  const groups: { name: string; rules: Rule[] }[] = []
  for (const d of DIMENSIONS) {
    const mine = config.budgets.filter((b) => b[d] !== undefined)
    if (mine.length === 0) continue
    const rules: Rule[] = spendRules(d)
    for (const p of PERIODS) {
      for (const b of mine) {
        const amount = b[p]
        if (amount === undefined) continue
        const value =
          d === 'route' ? (routeLabel(config, (b as Budget & { route: string }).route) as string) : (b.tenant as string)
        rules.push({ record: `${d}:llm_budget:${p}`, expr: `vector(${amount})`, labels: { [d]: value, currency } })
      }
    }
    for (const p of PERIODS) if (mine.some((b) => b[p] !== undefined)) rules.push(...alertRules(d, p))
    groups.push({ name: `tokentap-budgets-${d}`, rules })
  }
  const header = `# tokentap budgets: generated by \`tokentap budgets --config ${source}\`; edit the config and generate again.\n# tokentap measures and alerts; it never blocks requests (docs/cost.md).\n`
  return header + stringify({ groups }, { lineWidth: 0 })
}
