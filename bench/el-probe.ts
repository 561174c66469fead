import { PerformanceObserver, monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks'
import { writeHeapSnapshot } from 'node:v8'

/**
 * Preloaded into a proxy process by the benchmark only (`node --import …/el-probe.js`; tokentap
 * and the Node relays alike) and driven over the IPC channel, so a stall seen by the client has a
 * visible cause inside the process that serves traffic. Off unless asked, so it costs nothing in
 * the other phases.
 * - `el-start` … `el-stop` → `el`: the event loop's delay (perf_hooks, 1 ms resolution) and the
 *   GC pauses (count, total, longest) in between.
 * - `gc` → `gc-done`: memory after full collections (the process runs under --expose-gc), so the
 *   memory figures count what is held rather than garbage not yet collected.
 * - `snapshot` with a `file` → `snapshot-done`: a heap snapshot there (bench/lab/heap-per-stream.ts).
 */

let h: IntervalHistogram | undefined
let gcObserver: PerformanceObserver | undefined
const gc = { count: 0, ms: 0, max: 0 }

function tally(entries: readonly { duration: number }[]): void {
  for (const e of entries) {
    gc.count++
    gc.ms += e.duration
    gc.max = Math.max(gc.max, e.duration)
  }
}

if (typeof process.send === 'function') {
  process.on('message', (msg: { cmd?: string; file?: string }) => {
    if (msg.cmd === 'el-start') {
      h?.disable()
      h = monitorEventLoopDelay({ resolution: 1 })
      h.enable()
      gcObserver?.disconnect()
      Object.assign(gc, { count: 0, ms: 0, max: 0 })
      gcObserver = new PerformanceObserver((list) => tally(list.getEntries()))
      gcObserver.observe({ entryTypes: ['gc'] })
      process.send?.({ cmd: 'el-started' })
    } else if (msg.cmd === 'gc') {
      const collect = (globalThis as { gc?: () => void }).gc
      collect?.()
      // ArrayBuffers found dead are freed by a sweeper after the collection, and `external` drops
      // only then: collect twice more a little later before reading the figures.
      setTimeout(() => {
        collect?.()
        setTimeout(() => {
          collect?.()
          const m = process.memoryUsage()
          process.send?.({ cmd: 'gc-done', collected: collect === undefined ? 0 : 1, rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers })
        }, 100)
      }, 100)
    } else if (msg.cmd === 'snapshot') {
      writeHeapSnapshot(msg.file)
      process.send?.({ cmd: 'snapshot-done' })
    } else if (msg.cmd === 'el-stop' && h !== undefined) {
      h.disable()
      // Entries still queued in the observer would be lost on disconnect.
      tally(gcObserver?.takeRecords() ?? [])
      gcObserver?.disconnect()
      gcObserver = undefined
      process.send?.({ cmd: 'el', p50: h.percentile(50) / 1e6, p99: h.percentile(99) / 1e6, max: h.max / 1e6, count: h.count, gc_count: gc.count, gc_ms: gc.ms, gc_max_ms: gc.max })
      h = undefined
    }
  })
}
