import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'
import { validateConfig } from '../../src/config/load-config.ts'
import { ROOT } from '../helpers/paths.ts'

const load = <T>(...path: string[]): T => parse(readFileSync(join(ROOT, 'deploy', ...path), 'utf8')) as T

interface Datasource {
  readonly uid: string
  readonly type: string
  readonly url: string
  readonly jsonData?: { readonly exemplarTraceIdDestinations?: readonly { readonly name: string; readonly datasourceUid?: string; readonly url?: string }[] }
}

t.test('the compose demo sends spans to its trace backend, and Grafana’s exemplar link opens them there', async (t) => {
  const compose = load<{ services: Record<string, { command?: string[]; environment?: Record<string, string> }> }>('compose', 'docker-compose.yaml')
  const config = validateConfig(load<Record<string, unknown>>('compose', 'tokentap.yaml'))
  const endpoint = new URL(config.otel.traces?.endpoint as string)
  t.ok(compose.services[endpoint.hostname], `tokentap's traces go to a compose service (${endpoint.hostname})`)
  t.equal(endpoint.port, '4318', 'over OTLP/HTTP')
  t.equal(compose.services.jaeger.environment?.COLLECTOR_OTLP_ENABLED, 'true', 'which takes OTLP')
  t.equal(config.metrics.exemplars, true, 'exemplars on')
  t.ok(compose.services.prometheus.command?.includes('--enable-feature=exemplar-storage'), 'Prometheus keeps them')

  const prometheus = load<{ datasources: Datasource[] }>('grafana', 'provisioning', 'datasources', 'prometheus.yaml').datasources[0]
  const jaeger = load<{ datasources: Datasource[] }>('grafana', 'provisioning', 'datasources', 'jaeger.yaml').datasources[0]
  const links = prometheus.jsonData?.exemplarTraceIdDestinations ?? []
  t.same(
    links.find((l) => l.name === 'trace_id'),
    { name: 'trace_id', datasourceUid: jaeger.uid },
    'the trace_id label opens the provisioned trace datasource',
  )
  t.equal(jaeger.type, 'jaeger')
  t.equal(new URL(jaeger.url).hostname, 'jaeger', 'which reads the compose Jaeger')
  const dashboard = JSON.parse(readFileSync(join(ROOT, 'deploy', 'grafana', 'dashboards', 'tokentap.json'), 'utf8')) as {
    panels: { title: string; targets?: { exemplar?: boolean; expr: string }[] }[]
  }
  for (const title of ['Time to first token', 'Inter-token latency', 'End-to-end duration']) {
    const panel = dashboard.panels.find((p) => p.title === title)
    t.ok(
      panel?.targets?.some((x) => x.exemplar === true && x.expr.includes('histogram_quantile(0.99')),
      `the dashboard's ${title} P99 query shows exemplars`,
    )
  }
  t.equal(links.find((l) => l.name === 'request_id')?.url, 'http://localhost:9464/debug/requests/$${__value.raw}', 'request_id opens /debug/requests ($$ keeps the $ from provisioning)')
})
