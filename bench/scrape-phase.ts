import type { Job, ScrapeResult, StreamResult } from './load-client.ts'
import { cpuMicros } from './proc.ts'
import { round, summary } from './stats.ts'

/**
 * The benchmark's scrape phase, at one scale: load `models` models (one short stream each, so
 * every llm_ series of a model exists), then fetch `/metrics` back to back, first alone (the
 * proxy's CPU per scrape; the event-loop delay with nothing else to do), then while streams for
 * random models keep arriving (series keep changing between scrapes), beside the event-loop
 * delay of the same traffic without scrapes. Used by run.ts and by scrape.ts (this phase alone,
 * for A/B comparisons).
 */

export interface ScrapeDeps {
  /** Runs a job in the load generator process. */
  job<T>(j: Job): Promise<T>
  /** Asks the proxy's el-probe (bench/el-probe.ts). */
  ask(cmd: string, reply: string): Promise<Record<string, number>>
  /** The proxy's chat completions URL. */
  readonly streamUrl: string
  readonly metricsUrl: string
  /** The scraper's Accept header (Prometheus asks for OpenMetrics first). */
  readonly accept?: string
  /** Ask for gzip (Prometheus does) and decompress. */
  readonly gzip?: boolean
  body(plan: object, model: string): string
  /** The proxy's pid, for its CPU time (/proc). */
  readonly pid: number
}

/** One format's scrapes at a scale: the text one (what Prometheus's default Accept gets) or protobuf. */
interface FormatFigures {
  /** The answer's content-type. */
  readonly content_type: string
  readonly bytes: number
  /** Bytes on the wire (the same unless the body came compressed). */
  readonly wire_bytes: number
  /** Proxy CPU per scrape (on-CPU time of all its threads), measured over the scrapes without traffic, ms. */
  readonly proxy_cpu_ms_per_scrape: number
  /** Scrapes while streams keep arriving (what the targets judge). */
  readonly ms: { p50: number; p90: number; p99: number; max: number; mean: number }
  readonly ms_without_traffic: { p50: number; p99: number }
  readonly event_loop_delay_ms: { p50: number; p99: number; max: number }
}

export interface ScrapeFigures extends Omit<FormatFigures, 'content_type'> {
  readonly models: number
  /** The llm_ histogram series asked for (scrapeAtSeries), if any. */
  readonly series_asked?: number
  /** The proxy's memory with this scale's series, after a full GC (before the scrapes), MiB. */
  readonly memory_mib: { heap_used: number; external: number; held: number; rss: number }
  /** The same scrapes with the protobuf Accept, when the proxy answers it with protobuf; null otherwise. */
  readonly protobuf: FormatFigures | null
  /** What one scrape held (counted by the load generator on the last scrape). */
  readonly llm_histogram_series: number
  readonly llm_series: number
  readonly samples: number
  readonly scrapes: number
  readonly streams_during: number
  readonly event_loop_delay_traffic_only_ms: { p50: number; p99: number; max: number }
  readonly event_loop_delay_scrapes_only_ms: { p50: number; p99: number; max: number }
  readonly event_loop_delay_idle_ms: { p99: number; max: number }
  /** Inside the proxy (its registry's figures, via bench/el-probe.ts), with traffic and without. */
  readonly inside: { readonly with_traffic: InsideFigures; readonly without_traffic: InsideFigures }
}

/** Where a scrape's time went inside the proxy, and the GC pauses meanwhile. */
interface InsideFigures {
  readonly scrapes: number
  /** From the scrape's start to its last batch handed to the socket. */
  readonly ms: { p50: number; p99: number; max: number }
  /** Rendering and copying, the socket writes excluded. */
  readonly work_ms: { p50: number; p99: number; max: number }
  /** Waiting for the event loop to come back after each slice (the traffic's turn). */
  readonly yield_wait_ms: { p50: number; p99: number; max: number }
  readonly yields: { p50: number; max: number }
  /** The longest work between two turns of the loop (the slice the traffic waited behind). */
  readonly longest_work_ms: number
  readonly gc: { count: number; ms: number; max_ms: number; readonly by_kind: Record<string, { count: number; ms: number; max_ms: number }> }
}

/** The probe's flat gc_<kind>_count / _ms / _max_ms, by kind. */
function gcByKind(el: Record<string, number>): Record<string, { count: number; ms: number; max_ms: number }> {
  const out: Record<string, { count: number; ms: number; max_ms: number }> = {}
  for (const [key, count] of Object.entries(el)) {
    const m = /^gc_(.+)_count$/.exec(key)
    if (m === null) continue
    out[m[1]] = { count, ms: round(el[`gc_${m[1]}_ms`] ?? 0, 1), max_ms: round(el[`gc_${m[1]}_max_ms`] ?? 0, 1) }
  }
  return out
}

function inside(el: Record<string, number>): InsideFigures {
  const three = (name: string) => ({ p50: round(el[`scrape_${name}_p50`] ?? NaN), p99: round(el[`scrape_${name}_p99`] ?? NaN), max: round(el[`scrape_${name}_max`] ?? NaN) })
  return {
    scrapes: el.scrape_count ?? 0,
    ms: three('ms'),
    work_ms: three('work'),
    yield_wait_ms: three('wait'),
    yields: { p50: el.scrape_yields_p50 ?? NaN, max: el.scrape_yields_max ?? NaN },
    longest_work_ms: round(el.scrape_longest_max ?? NaN),
    gc: { count: el.gc_count ?? 0, ms: round(el.gc_ms ?? 0, 1), max_ms: round(el.gc_max_ms ?? 0, 1), by_kind: gcByKind(el) },
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
const modelName = (i: number): string => `bench-model-${String(i).padStart(4, '0')}`
const plan = (chunks: number, gapMs: number): object => ({ ttft_ms: 0, chunks: Array.from({ length: chunks - 1 }, () => [gapMs, 1]) })

/** What Prometheus 2.x/3.x sends by default (scrape_protocols): OpenMetrics first. */
export const PROMETHEUS_ACCEPT = 'application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'

/**
 * What Prometheus sends with `scrape_protocols: [PrometheusProto, …]` (native histograms need
 * it): the delimited protobuf MetricFamily first. A server without it answers with text.
 */
const PROTOBUF_ACCEPT =
  'application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.1'
const isProtobuf = (contentType: string): boolean => contentType.startsWith('application/vnd.google.protobuf')

/**
 * Whether the proxy serves the protobuf exposition: asked with the protobuf Accept, it answers with
 * that content-type (before native histograms land it answers with text, and the protobuf rows
 * are reported as not served).
 */
export async function servesProtobuf(d: ScrapeDeps): Promise<boolean> {
  const r = await d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: 1, pauseMs: 0, accept: PROTOBUF_ACCEPT, gzip: d.gzip })
  return isProtobuf(r.contentType)
}

/** Models already loaded into the proxy (phases run at growing scales). */
let loaded = 0
/** llm_ histogram series a model adds (measured once, by scrapeAtSeries). */
let seriesPerModel: number | undefined

async function loadModels(d: ScrapeDeps, models: number): Promise<void> {
  for (let i = loaded; i < models; i += 50) {
    await Promise.all(
      Array.from({ length: Math.min(50, models - i) }, (_, j) =>
        d.job({ kind: 'streams', url: d.streamUrl, body: d.body(plan(4, 0), modelName(i + j)), count: 1, concurrency: 1, phaseMs: 0, idPrefix: `model-${i + j}`, detail: false }),
      ),
    )
  }
  loaded = Math.max(loaded, models)
}

/** llm_ histogram series in a scrape now (the registry collects at most once a second: wait for a fresh one). */
async function seriesNow(d: ScrapeDeps): Promise<number> {
  await sleep(1100)
  return (await d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: 0, pauseMs: 0, inspect: true, accept: d.accept, gzip: d.gzip })).histogramSeries
}

/**
 * The phase at a number of llm_ histogram series rather than of models: how many series a model
 * adds is counted once (5 models loaded between two scrapes), so the scale holds when the
 * metrics per model change.
 */
export async function scrapeAtSeries(d: ScrapeDeps, series: number, scrapes: number, protobuf: boolean): Promise<ScrapeFigures> {
  if (seriesPerModel === undefined) {
    const s0 = await seriesNow(d)
    await loadModels(d, loaded + 5)
    seriesPerModel = Math.max(1, (await seriesNow(d)) - s0) / 5
  }
  const now = await seriesNow(d)
  const models = loaded + Math.max(0, Math.ceil((series - now) / seriesPerModel))
  return { ...(await scrapePhase(d, models, scrapes, protobuf)), series_asked: series }
}

async function scrapePhase(d: ScrapeDeps, models: number, scrapes: number, protobuf = false): Promise<ScrapeFigures> {
  await loadModels(d, models)
  await sleep(500)
  await d.job({ kind: 'get', url: d.metricsUrl, times: 2, pauseMs: 0, accept: d.accept, gzip: d.gzip })
  const mem = await d.ask('gc', 'gc-done')
  const mib = (b: number): number => round(b / 2 ** 20, 1)
  const memory = { heap_used: mib(mem.heapUsed), external: mib(mem.external), held: mib(mem.heapUsed + mem.external), rss: mib(mem.rss) }
  const pb = protobuf ? PROTOBUF_ACCEPT : undefined
  await d.ask('el-start', 'el-started')
  await sleep(500)
  const idle = await d.ask('el-stop', 'el')
  // Scrapes alone (nothing changes between them): the proxy's CPU per scrape, without the
  // traffic's own CPU to subtract, and the loop's delay with nothing else to do.
  await d.ask('el-start', 'el-started')
  const cpu0 = cpuMicros([d.pid])
  const alone = await d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: scrapes, pauseMs: 0, accept: d.accept, gzip: d.gzip })
  const cpuPerScrape = (cpuMicros([d.pid]) - cpu0) / scrapes / 1000
  const elAlone = await d.ask('el-stop', 'el')
  let pbAlone: ScrapeResult | undefined
  let pbCpu = NaN
  if (pb !== undefined) {
    const c0 = cpuMicros([d.pid])
    pbAlone = await d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: scrapes, pauseMs: 0, accept: pb, gzip: d.gzip })
    pbCpu = (cpuMicros([d.pid]) - c0) / scrapes / 1000
  }
  // Streams for random models of this scale (so series keep changing between scrapes).
  const traffic = d.job<StreamResult[]>({
    kind: 'streams',
    url: d.streamUrl,
    body: '',
    bodies: Array.from({ length: 97 }, (_, i) => d.body(plan(10, 5), modelName((i * 31) % models))),
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
  await d.ask('el-start', 'el-started')
  const scrape = await d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: scrapes, pauseMs: 0, inspect: true, accept: d.accept, gzip: d.gzip })
  const el = await d.ask('el-stop', 'el')
  let pbFigures: FormatFigures | null = null
  const ms3 = (h: Record<string, number>): { p50: number; p99: number; max: number } => ({ p50: round(h.p50), p99: round(h.p99), max: round(h.max) })
  if (pb !== undefined && pbAlone !== undefined) {
    await d.ask('el-start', 'el-started')
    const pbScrape = await d.job<ScrapeResult>({ kind: 'get', url: d.metricsUrl, times: scrapes, pauseMs: 0, accept: pb, gzip: d.gzip })
    const pbEl = await d.ask('el-stop', 'el')
    const ps = summary(pbScrape.ms)
    const pa = summary(pbAlone.ms)
    pbFigures = {
      content_type: pbScrape.contentType,
      bytes: pbScrape.bytes,
      wire_bytes: pbScrape.wireBytes,
      proxy_cpu_ms_per_scrape: round(pbCpu, 1),
      ms: { p50: round(ps.p50), p90: round(ps.p90), p99: round(ps.p99), max: round(ps.max), mean: round(ps.mean) },
      ms_without_traffic: { p50: round(pa.p50), p99: round(pa.p99) },
      event_loop_delay_ms: ms3(pbEl),
    }
  }
  await d.job({ kind: 'stop' })
  const during = await traffic
  const s = summary(scrape.ms)
  const sa = summary(alone.ms)
  return {
    models,
    memory_mib: memory,
    protobuf: pbFigures,
    llm_histogram_series: scrape.histogramSeries,
    llm_series: scrape.llmSeries,
    samples: scrape.samples,
    bytes: scrape.bytes,
    wire_bytes: scrape.wireBytes,
    scrapes,
    streams_during: during.length,
    proxy_cpu_ms_per_scrape: round(cpuPerScrape, 1),
    ms: { p50: round(s.p50), p90: round(s.p90), p99: round(s.p99), max: round(s.max), mean: round(s.mean) },
    ms_without_traffic: { p50: round(sa.p50), p99: round(sa.p99) },
    event_loop_delay_ms: ms3(el),
    event_loop_delay_scrapes_only_ms: ms3(elAlone),
    event_loop_delay_traffic_only_ms: ms3(trafficOnly),
    event_loop_delay_idle_ms: { p99: round(idle.p99), max: round(idle.max) },
    inside: { with_traffic: inside(el), without_traffic: inside(elAlone) },
  }
}

/** One line for the report. */
export function describeScrape(f: ScrapeFigures): string {
  return (
    `${f.models} models = ${f.llm_histogram_series.toLocaleString('en')} llm_ histogram series (${f.llm_series.toLocaleString('en')} llm_ series, ${f.samples.toLocaleString('en')} samples, ${(f.bytes / 2 ** 20).toFixed(2)} MiB): ` +
    `with traffic p50 ${f.ms.p50} ms, p99 ${f.ms.p99} ms over ${f.scrapes} scrapes, event-loop delay p99 ${f.event_loop_delay_ms.p99} ms (traffic alone ${f.event_loop_delay_traffic_only_ms.p99} ms); ` +
    `without traffic p50 ${f.ms_without_traffic.p50} ms, event-loop delay p99 ${f.event_loop_delay_scrapes_only_ms.p99} ms (idle ${f.event_loop_delay_idle_ms.p99} ms), proxy CPU ${f.proxy_cpu_ms_per_scrape} ms per scrape` +
    describeInside('with traffic', f.inside.with_traffic) +
    describeInside('without', f.inside.without_traffic) +
    (f.protobuf === null
      ? ''
      : `\n    protobuf (${f.protobuf.content_type}, ${(f.protobuf.bytes / 2 ** 20).toFixed(2)} MiB): with traffic p50 ${f.protobuf.ms.p50} ms, p99 ${f.protobuf.ms.p99} ms, event-loop delay p99 ${f.protobuf.event_loop_delay_ms.p99} ms; without traffic p50 ${f.protobuf.ms_without_traffic.p50} ms, proxy CPU ${f.protobuf.proxy_cpu_ms_per_scrape} ms per scrape`) +
    `\n    memory after a full GC: heap ${f.memory_mib.heap_used} MiB + external ${f.memory_mib.external} MiB, RSS ${f.memory_mib.rss} MiB`
  )
}

function describeInside(when: string, i: InsideFigures): string {
  if (i.scrapes === 0) return ''
  return (
    `\n    inside the proxy, ${when}: p50 ${i.ms.p50} ms, p99 ${i.ms.p99} ms (work p50 ${i.work_ms.p50} / p99 ${i.work_ms.p99} ms, ` +
    `waiting for the loop p50 ${i.yield_wait_ms.p50} / p99 ${i.yield_wait_ms.p99} ms over ${i.yields.p50} turns), longest work between turns ${i.longest_work_ms} ms; ` +
    `GC ${i.gc.count} pauses, ${i.gc.ms} ms, longest ${i.gc.max_ms} ms (${Object.entries(i.gc.by_kind)
      .map(([kind, k]) => `${kind} ${k.count}: ${k.ms} ms, longest ${k.max_ms}`)
      .join('; ')})`
  )
}
