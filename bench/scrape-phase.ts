import type { Job, ScrapeResult, StreamResult } from './load-client.ts'
import { cpuMicros } from './proc.ts'
import { evenPlan, requestBody } from './plans.ts'
import { round, summary } from './stats.ts'

/**
 * The scrape phase at one scale: load models (one short stream each, so every llm_ series of a
 * model exists), then fetch `/metrics` back to back, first alone (the proxy's CPU per scrape),
 * then while streams for random models keep arriving (series keep changing between scrapes:
 * what the targets judge), beside the event-loop delay of the same traffic without scrapes.
 */

export interface ScrapeDeps {
  job<T>(j: Job): Promise<T>
  /** Asks the proxy's el-probe (bench/el-probe.ts). */
  ask(cmd: string, reply: string): Promise<Record<string, number>>
  readonly streamUrl: string
  readonly metricsUrl: string
  readonly pid: number
}

/** One format's scrapes at a scale; `ScrapeFigures`: the text one's, with the rest of the scale's figures. */
type FormatFigures = ReturnType<typeof formatFigures>
export type ScrapeFigures = Awaited<ReturnType<typeof scrapeAtSeries>>

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
const modelName = (i: number): string => `bench-model-${String(i).padStart(4, '0')}`
const ms3 = (h: Record<string, number>) => ({ p50: round(h.p50), p99: round(h.p99), max: round(h.max) })

/** What Prometheus 2.x/3.x sends by default (scrape_protocols): OpenMetrics first. */
export const PROMETHEUS_ACCEPT = 'application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'

/** What Prometheus sends with `scrape_protocols: [PrometheusProto, …]` (native histograms need it). */
const PROTOBUF_ACCEPT =
  'application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.1'

/** One format's figures: scrapes with traffic (what the targets judge) and without, the proxy's CPU per scrape without traffic (all its threads). */
function formatFigures(r: ScrapeResult, alone: ScrapeResult, cpuMs: number, el: Record<string, number>) {
  const s = summary(r.ms)
  const a = summary(alone.ms)
  return {
    content_type: r.contentType,
    /** Decompressed, and on the wire. */
    bytes: r.bytes,
    wire_bytes: r.wireBytes,
    proxy_cpu_ms_per_scrape: round(cpuMs, 1),
    ms: { p50: round(s.p50), p90: round(s.p90), p99: round(s.p99), max: round(s.max), mean: round(s.mean) },
    ms_without_traffic: { p50: round(a.p50), p99: round(a.p99) },
    event_loop_delay_ms: ms3(el),
  }
}

/** Whether the proxy answers the protobuf Accept with protobuf (if not, the protobuf rows read "not served"). */
export async function servesProtobuf(d: ScrapeDeps): Promise<boolean> {
  const r = await d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: 1, accept: PROTOBUF_ACCEPT, gzip: true })
  return r.contentType.startsWith('application/vnd.google.protobuf')
}

/** Models already loaded into the proxy (the scales grow), and the llm_ histogram series a model adds. */
let loaded = 0
let seriesPerModel: number | undefined

async function loadModels(d: ScrapeDeps, models: number): Promise<void> {
  for (let i = loaded; i < models; i += 50) {
    const batch = Array.from({ length: Math.min(50, models - i) }, (_, j) => i + j)
    await Promise.all(
      batch.map((m) => d.job({ kind: 'streams', url: d.streamUrl, body: requestBody(evenPlan(4, 0), modelName(m)), count: 1, concurrency: 1, phaseMs: 0, idPrefix: `model-${m}`, detail: false })),
    )
  }
  loaded = Math.max(loaded, models)
}

/** llm_ histogram series in a scrape now (the registry collects at most once a second: wait for a fresh one). */
async function seriesNow(d: ScrapeDeps): Promise<number> {
  await sleep(1100)
  return (await d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: 0, inspect: true, accept: PROMETHEUS_ACCEPT, gzip: true })).histogramSeries
}

/** The phase at a number of llm_ histogram series (a model's series counted once), so a scale holds when the metrics per model change. */
export async function scrapeAtSeries(d: ScrapeDeps, series: number, scrapes: number, protobuf: boolean) {
  if (seriesPerModel === undefined) {
    const s0 = await seriesNow(d)
    await loadModels(d, loaded + 5)
    seriesPerModel = Math.max(1, (await seriesNow(d)) - s0) / 5
  }
  const models = loaded + Math.max(0, Math.ceil((series - (await seriesNow(d))) / seriesPerModel))
  await loadModels(d, models)
  await sleep(500)
  await d.job({ kind: 'get', url: d.metricsUrl, times: 2, accept: PROMETHEUS_ACCEPT, gzip: true })
  const mem = await d.ask('gc', 'gc-done')
  const mib = (b: number): number => round(b / 2 ** 20, 1)
  const memory = { heap_used: mib(mem.heapUsed), external: mib(mem.external), held: mib(mem.heapUsed + mem.external), rss: mib(mem.rss) }
  const scrape = (accept: string, inspect = false): Promise<ScrapeResult> => d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: scrapes, inspect, accept, gzip: true })
  const formats = protobuf ? [PROMETHEUS_ACCEPT, PROTOBUF_ACCEPT] : [PROMETHEUS_ACCEPT]
  // Scrapes alone (nothing changes between them): the proxy's CPU per scrape without the traffic's.
  const alone: { r: ScrapeResult; cpuMs: number }[] = []
  for (const accept of formats) {
    const cpu0 = cpuMicros([d.pid])
    const r = await scrape(accept)
    alone.push({ r, cpuMs: (cpuMicros([d.pid]) - cpu0) / scrapes / 1000 })
  }
  const traffic = d.job<StreamResult[]>({
    kind: 'streams',
    url: d.streamUrl,
    body: '',
    bodies: Array.from({ length: 97 }, (_, i) => requestBody(evenPlan(10, 5), modelName((i * 31) % models))),
    count: 1_000_000,
    concurrency: 10,
    phaseMs: 0,
    idPrefix: `scrape-traffic-${models}`,
    detail: false,
  })
  await sleep(300)
  // The same traffic without scrapes: what the scrapes add is the difference.
  await d.ask('el-start', 'el-started')
  await sleep(2000)
  const trafficOnly = await d.ask('el-stop', 'el')
  const figures: FormatFigures[] = []
  let counted: ScrapeResult | undefined
  for (const [k, accept] of formats.entries()) {
    await d.ask('el-start', 'el-started')
    const r = await scrape(accept, k === 0)
    counted ??= r
    figures.push(formatFigures(r, alone[k].r, alone[k].cpuMs, await d.ask('el-stop', 'el')))
  }
  await d.job({ kind: 'stop' })
  const during = await traffic
  const { content_type: _, ...text } = figures[0]
  const c = counted as ScrapeResult
  return {
    ...text,
    models,
    series_asked: series,
    memory_mib: memory,
    protobuf: figures[1] ?? null,
    llm_histogram_series: c.histogramSeries,
    llm_series: c.llmSeries,
    samples: c.samples,
    scrapes,
    streams_during: during.length,
    event_loop_delay_traffic_only_ms: ms3(trafficOnly),
  }
}

/** One line for the report. */
export function describeScrape(f: ScrapeFigures): string {
  const pb = f.protobuf
  return (
    `${f.models} models = ${f.llm_histogram_series.toLocaleString('en')} llm_ histogram series (${f.llm_series.toLocaleString('en')} llm_ series, ${f.samples.toLocaleString('en')} samples, ${(f.bytes / 2 ** 20).toFixed(2)} MiB): ` +
    `with traffic p50 ${f.ms.p50} ms, p99 ${f.ms.p99} ms over ${f.scrapes} scrapes, event-loop delay p99 ${f.event_loop_delay_ms.p99} ms (traffic alone ${f.event_loop_delay_traffic_only_ms.p99} ms); ` +
    `without traffic p50 ${f.ms_without_traffic.p50} ms, proxy CPU ${f.proxy_cpu_ms_per_scrape} ms per scrape` +
    (pb === null
      ? ''
      : `\n    protobuf (${(pb.bytes / 2 ** 20).toFixed(2)} MiB): with traffic p50 ${pb.ms.p50} ms, p99 ${pb.ms.p99} ms, event-loop delay p99 ${pb.event_loop_delay_ms.p99} ms; without traffic p50 ${pb.ms_without_traffic.p50} ms, proxy CPU ${pb.proxy_cpu_ms_per_scrape} ms per scrape`) +
    `\n    memory after a full GC: heap ${f.memory_mib.heap_used} MiB + external ${f.memory_mib.external} MiB, RSS ${f.memory_mib.rss} MiB`
  )
}
