import { createRequire } from 'node:module'
import { hostname } from 'node:os'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import type { IntervalHistogram } from 'node:perf_hooks'
import type { ProcessView } from './live-message-types.ts'

/**
 * The process's own health for the live page, read once a message, and which instance this is;
 * the event-loop histogram runs only while a live page is open, as it has a cost.
 */

const require = createRequire(import.meta.url)

/** tokentap's version from its own package.json (the package refers to itself by name). */
function ownVersion(): string {
  try {
    return (require('tokentap/package.json') as { version: string }).version
  } catch {
    return 'unknown'
  }
}

export class ProcessFigures {
  readonly #instance = hostname()
  readonly #version = ownVersion()
  #loop: IntervalHistogram | undefined
  #cpu = process.cpuUsage()
  #at = process.hrtime.bigint()

  /** Starts the event-loop delay histogram (while a live page is open). */
  start(): void {
    if (this.#loop !== undefined) return
    this.#loop = monitorEventLoopDelay({ resolution: 10 })
    this.#loop.enable()
  }

  stop(): void {
    this.#loop?.disable()
    this.#loop = undefined
  }

  read(): ProcessView {
    const at = process.hrtime.bigint()
    const cpu = process.cpuUsage()
    const wallMicros = Number(at - this.#at) / 1000
    const used = cpu.user - this.#cpu.user + (cpu.system - this.#cpu.system)
    this.#at = at
    this.#cpu = cpu
    const loop = this.#loop
    // The histogram's figures are in ns; it holds nothing before its first sample.
    const sampled = loop !== undefined && loop.count > 0
    const mem = process.memoryUsage()
    const view: ProcessView = {
      instance: this.#instance,
      pid: process.pid,
      version: this.#version,
      node: process.versions.node,
      uptime: Math.round(process.uptime()),
      cpu: wallMicros > 0 ? Math.round((used / wallMicros) * 10_000) : null,
      loopP99: sampled ? Math.round(loop.percentile(99) / 1000) : null,
      loopMax: sampled ? Math.round(loop.max / 1000) : null,
      rss: mem.rss,
      heapUsed: mem.heapUsed,
    }
    loop?.reset()
    return view
  }
}
