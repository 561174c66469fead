import { escapeLabelValue, formatValue, header } from './format.ts'

/**
 * OpenMetrics text (https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md) of prom-client's
 * metric JSON: prom-client writes OpenMetrics only from a dedicated registry and renames counters in place.
 */

/** The part of prom-client's `getMetricsAsJSON()` shape this needs. */
export interface PromClientMetric {
  readonly name: string
  readonly help: string
  readonly type: string
  readonly values?: readonly {
    readonly value: number
    readonly labels?: Readonly<Record<string, string | number>>
    readonly metricName?: string
  }[]
}

/** Whether an `Accept` header asks for OpenMetrics (Prometheus sends it first when it can read it). */
export function wantsOpenMetrics(accept: string | undefined): boolean {
  return accept?.includes('application/openmetrics-text') === true
}

function renderLabelSet(labels: Readonly<Record<string, string | number>> | undefined): string {
  if (labels === undefined) return ''
  let out = ''
  for (const [k, v] of Object.entries(labels)) {
    if (out !== '') out += ','
    out += `${k}="${escapeLabelValue(typeof v === 'number' ? formatValue(v) : String(v))}"`
  }
  return out === '' ? '' : `{${out}}`
}

/** OpenMetrics families for prom-client metrics (no `# EOF`: the caller ends the exposition). */
export function promClientToOpenMetrics(metrics: readonly PromClientMetric[]): string {
  let out = ''
  for (const m of metrics) {
    const counter = m.type === 'counter'
    // OpenMetrics names a counter family without `_total`; its sample keeps it.
    const family = counter ? m.name.replace(/_total$/, '') : m.name
    const type =
      m.type === 'counter' || m.type === 'gauge' || m.type === 'histogram' || m.type === 'summary' ? m.type : 'unknown'
    out += header(family, m.help, type, true)
    for (const v of m.values ?? []) {
      const name = v.metricName ?? (counter ? `${family}_total` : m.name)
      out += `${name}${renderLabelSet(v.labels)} ${formatValue(v.value)}\n`
    }
  }
  return out
}
