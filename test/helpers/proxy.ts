import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import pino from 'pino'
import { buildApp } from '../../src/app.ts'
import type { BuildOptions, TokentapApp } from '../../src/app.ts'
import { validateConfig } from '../../src/config/load-config.ts'
import type { Config } from '../../src/config/schema.ts'
import type { SimPlanRequest } from '../../src/sim/schedule.ts'
import { parseMetrics } from './prometheus.ts'
import type { Sample } from './prometheus.ts'

/** A running tokentap on port 0 (proxy and admin), with captured log lines. */
export interface RunningProxy {
  readonly app: TokentapApp
  readonly config: Config
  /** `http://127.0.0.1:PORT` of the proxy listener. */
  readonly url: string
  readonly adminUrl: string
  /** Log lines written so far, parsed. */
  readonly logs: Record<string, unknown>[]
  scrape(): Promise<Sample[]>
  scrapeText(): Promise<string>
  /** Resolves when `n` request log lines have been written (requests are recorded on close). */
  waitForRequests(n: number, timeoutMs?: number): Promise<Record<string, unknown>[]>
  close(): Promise<void>
}

/**
 * `options.dispatcher` replaces the upstream agent (tests that watch its sockets); `options.prepare`
 * adds to the app before it listens (an embedding app's own hooks).
 */
export async function startProxy(raw: Record<string, unknown>, options: Omit<BuildOptions, 'logger'> & { readonly prepare?: (app: TokentapApp) => void } = {}): Promise<RunningProxy> {
  const config = validateConfig({ server: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, ...raw })
  const logs: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) logs.push(JSON.parse(line) as Record<string, unknown>)
      cb()
    },
  })
  const logger = pino({ level: (raw.log as { level?: string } | undefined)?.level ?? 'info', base: undefined }, sink)
  const { prepare, ...build } = options
  const app = await buildApp(config, { ...build, logger })
  prepare?.(app)
  await app.listen({ host: '127.0.0.1', port: 0 })
  await app.tokentap.admin.listen({ host: '127.0.0.1', port: 0 })
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  const adminUrl = `http://127.0.0.1:${(app.tokentap.admin.server.address() as AddressInfo).port}`
  const requestLines = () => logs.filter((l) => l.msg === 'request')
  const scrapeText = async (): Promise<string> => (await fetch(`${adminUrl}/metrics`)).text()
  return {
    app,
    config,
    url,
    adminUrl,
    logs,
    scrapeText,
    scrape: async () => parseMetrics(await scrapeText()),
    async waitForRequests(n, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs
      while (requestLines().length < n) {
        if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${n} request log lines, got ${requestLines().length}`)
        await new Promise((r) => setTimeout(r, 5))
      }
      return requestLines()
    },
    async close() {
      // Tests end at once; graceful draining is tested on the real process (graceful-shutdown.test.ts).
      // A connection whose client aborted a stream can otherwise hold app.close() for ~70 s.
      app.server.closeAllConnections()
      await app.close()
    },
  }
}

/** A route to the built-in simulator, for tests that drive a known schedule. */
export function simRoute(prefix = '/sim', simulator: Record<string, unknown> = {}): Record<string, unknown> {
  return { prefix, simulator: { jitter_ms: 0, stall_probability: 0, burst_every: 0, ...simulator } }
}

/** SDK request options that ask the simulator for an exact plan (`x-tokentap-sim` header). */
export function simPlan(plan: SimPlanRequest): { headers: Record<string, string> } {
  return { headers: { 'x-tokentap-sim': JSON.stringify(plan) } }
}
