import { subscribe } from 'node:diagnostics_channel'
import { PerformanceObserver, constants, monitorEventLoopDelay } from 'node:perf_hooks'
import type { IntervalHistogram, PerformanceEntry } from 'node:perf_hooks'
import { writeHeapSnapshot } from 'node:v8'

/**
 * Preloaded into a proxy process by the benchmark only (`node --import …/el-probe.js`; tokentap,
 * the Node relays and the Portkey gateway alike): between an `el-start` and an `el-stop` message
 * on the IPC channel it measures the event loop's delay (perf_hooks, 1 ms resolution) and every
 * GC pause (count, total and longest, by kind), so a stall seen in the gap distortion has a
 * visible cause inside the process that serves traffic. Off unless asked, so it costs nothing in
 * the other phases.
 * tokentap's scrapes publish their own figures (src/metrics/prometheus/registry.ts, `tokentap:scrape`): how
 * long each took inside the proxy, how much of it was work and how much waiting for the event
 * loop to come back; they are summed up the same way.
 * A `gc` message runs a full collection (the benchmark starts the process with --expose-gc), so
 * the memory figures count what the process holds rather than garbage not yet collected.
 * A `snapshot` message with a `file` writes a heap snapshot there (bench/heap-per-stream.ts).
 */

/** GC kinds as perf_hooks reports them (`entry.detail.kind`). */
const KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'mark_compact',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak_callbacks',
}

interface GcTally {
  count: number
  ms: number
  max_ms: number
}

let h: IntervalHistogram | undefined
let gcObserver: PerformanceObserver | undefined
let gc: Record<string, GcTally> = {}

/** Per scrape while measuring (the registry's ScrapeStats). */
const scrapes = { ms: [] as number[], work: [] as number[], wait: [] as number[], yields: [] as number[], longest: [] as number[] }
let measuring = false
subscribe('tokentap:scrape', (message) => {
  if (!measuring) return
  const m = message as { ms: number; work_ms: number; yield_wait_ms: number; yields: number; longest_work_ms: number }
  scrapes.ms.push(m.ms)
  scrapes.work.push(m.work_ms)
  scrapes.wait.push(m.yield_wait_ms)
  scrapes.yields.push(m.yields)
  scrapes.longest.push(m.longest_work_ms)
})

/** Nearest-rank percentile. */
function pct(values: readonly number[], p: number): number {
  if (values.length === 0) return 0
  const a = [...values].sort((x, y) => x - y)
  return a[Math.min(a.length - 1, Math.max(0, Math.ceil((p / 100) * a.length) - 1))]
}

/** Flat figures of the scrapes seen (none outside tokentap). */
function scrapeFigures(): Record<string, number> {
  const out: Record<string, number> = { scrape_count: scrapes.ms.length }
  if (scrapes.ms.length === 0) return out
  for (const [name, values] of Object.entries(scrapes)) {
    out[`scrape_${name}_p50`] = pct(values, 50)
    out[`scrape_${name}_p99`] = pct(values, 99)
    out[`scrape_${name}_max`] = pct(values, 100)
  }
  return out
}

function tally(entries: readonly PerformanceEntry[]): void {
  for (const e of entries) {
    const kind = KINDS[(e as unknown as { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'other'
    const t = gc[kind] ?? { count: 0, ms: 0, max_ms: 0 }
    gc[kind] = t
    t.count++
    t.ms += e.duration
    if (e.duration > t.max_ms) t.max_ms = e.duration
  }
}

function startGc(): void {
  gcObserver?.disconnect()
  gc = {}
  gcObserver = new PerformanceObserver((list) => tally(list.getEntries()))
  gcObserver.observe({ entryTypes: ['gc'] })
}

if (typeof process.send === 'function') {
  process.on('message', (msg: { cmd?: string; file?: string }) => {
    if (msg.cmd === 'el-start') {
      h?.disable()
      h = monitorEventLoopDelay({ resolution: 1 })
      h.enable()
      startGc()
      for (const values of Object.values(scrapes)) values.length = 0
      measuring = true
      process.send?.({ cmd: 'el-started' })
    } else if (msg.cmd === 'gc') {
      // Only with --expose-gc: memory figures count what is held, not garbage not yet collected.
      const collect = (globalThis as { gc?: () => void }).gc
      collect?.()
      // ArrayBuffers found dead are freed by a sweeper that runs after the collection, and
      // `external` drops only then: collect again a little later before reading the figures.
      setTimeout(() => {
        collect?.()
        setTimeout(() => {
          collect?.()
          // After the collection: what the heap and the buffers outside it really hold.
          const m = process.memoryUsage()
          process.send?.({ cmd: 'gc-done', collected: collect === undefined ? 0 : 1, rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers })
        }, 100)
      }, 100)
    } else if (msg.cmd === 'snapshot') {
      writeHeapSnapshot(msg.file)
      process.send?.({ cmd: 'snapshot-done' })
    } else if (msg.cmd === 'el-stop' && h !== undefined) {
      h.disable()
      measuring = false
      // Entries still queued in the observer would be lost on disconnect.
      tally(gcObserver?.takeRecords() ?? [])
      gcObserver?.disconnect()
      gcObserver = undefined
      const ms = (ns: number): number => ns / 1e6
      let count = 0
      let total = 0
      let max = 0
      for (const t of Object.values(gc)) {
        count += t.count
        total += t.ms
        max = Math.max(max, t.max_ms)
      }
      // Flat numbers (askChild's replies are records of numbers): gc_<kind>_count, _ms, _max_ms.
      const byKind: Record<string, number> = {}
      for (const [kind, t] of Object.entries(gc)) {
        byKind[`gc_${kind}_count`] = t.count
        byKind[`gc_${kind}_ms`] = t.ms
        byKind[`gc_${kind}_max_ms`] = t.max_ms
      }
      process.send?.({ cmd: 'el', p50: ms(h.percentile(50)), p99: ms(h.percentile(99)), max: ms(h.max), count: h.count, gc_count: count, gc_ms: total, gc_max_ms: max, ...byKind, ...scrapeFigures() })
      h = undefined
    }
  })
}
