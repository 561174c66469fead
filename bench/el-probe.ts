import { monitorEventLoopDelay } from 'node:perf_hooks'
import type { IntervalHistogram } from 'node:perf_hooks'

/**
 * Preloaded into the proxy process by the benchmark only (`node --import …/el-probe.js`):
 * measures the event loop's delay (perf_hooks, 1 ms resolution) between an `el-start` and an
 * `el-stop` message on the IPC channel, so the scrape's effect on the loop is measured inside the
 * process that serves traffic. Off unless asked, so it costs nothing in the other phases.
 * A `gc` message runs a full collection (the benchmark starts the proxy with --expose-gc), so
 * the memory figures count what the proxy holds rather than garbage not yet collected.
 */

let h: IntervalHistogram | undefined
if (typeof process.send === 'function') {
  process.on('message', (msg: { cmd?: string }) => {
    if (msg.cmd === 'el-start') {
      h?.disable()
      h = monitorEventLoopDelay({ resolution: 1 })
      h.enable()
      process.send?.({ cmd: 'el-started' })
    } else if (msg.cmd === 'gc') {
      // Only with --expose-gc: memory figures count what is held, not garbage not yet collected.
      const gc = (globalThis as { gc?: () => void }).gc
      gc?.()
      // ArrayBuffers found dead are freed by a sweeper that runs after the collection, and
      // `external` drops only then: collect again a little later before reading the figures.
      setTimeout(() => {
        gc?.()
        setTimeout(() => {
          gc?.()
          // After the collection: what the heap and the buffers outside it really hold.
          const m = process.memoryUsage()
          process.send?.({ cmd: 'gc-done', collected: gc === undefined ? 0 : 1, rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers })
        }, 100)
      }, 100)
    } else if (msg.cmd === 'el-stop' && h !== undefined) {
      h.disable()
      const ms = (ns: number): number => ns / 1e6
      process.send?.({ cmd: 'el', p50: ms(h.percentile(50)), p99: ms(h.percentile(99)), max: ms(h.max), count: h.count })
      h = undefined
    }
  })
}
