import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { stringify } from 'yaml'

/**
 * A real Prometheus server (the one on PATH, Debian's 2.42 in CI) scraping given targets every
 * second, on a free port with its own data directory, and its HTTP API as small helpers.
 */

export interface RunningPrometheus {
  /** The HTTP API's base URL (`…/api/v1`). */
  readonly api: string
  /** An instant query's result vector. */
  query(q: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>
  /** The single value of a query, or undefined while it has none (or several). */
  number(q: string): Promise<number | undefined>
  /** Every loaded rule whose health is not ok, as `name: health error`. */
  unhealthyRules(): Promise<string[]>
  /** Asks `fn` again every 250 ms until it gives a value (polling a separate process: it sends no events). */
  waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs?: number): Promise<T>
  close(): Promise<void>
}

async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms))

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      const v = await fn()
      if (v !== undefined) return v
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await pause(250)
  }
}

/** Starts `binary` scraping `targets` (host:port) as job `tokentap`; `features` go to `--enable-feature`. */
export async function startPrometheus(
  binary: string,
  targets: readonly string[],
  options: { features?: readonly string[]; scrape?: Record<string, unknown>; ruleFiles?: readonly string[] } = {},
): Promise<RunningPrometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-prometheus-'))
  const port = await freePort()
  writeFileSync(
    join(dir, 'prometheus.yml'),
    stringify({
      global: { scrape_interval: '1s', evaluation_interval: '1s' },
      rule_files: options.ruleFiles ?? [],
      scrape_configs: [{ job_name: 'tokentap', static_configs: [{ targets }], ...options.scrape }],
    }),
  )
  const args = [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`]
  for (const f of options.features ?? []) args.push(`--enable-feature=${f}`)
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] })
  let log = ''
  child.stderr?.setEncoding('utf8').on('data', (s: string) => (log = (log + s).slice(-4000)))
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const close = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      const kill = setTimeout(() => child.kill('SIGKILL'), 5000)
      await exited
      clearTimeout(kill)
    }
    rmSync(dir, { recursive: true, force: true })
  }
  const api = `http://127.0.0.1:${port}/api/v1`
  const query: RunningPrometheus['query'] = async (q) => {
    const res = await fetch(`${api}/query?query=${encodeURIComponent(q)}`)
    const body = (await res.json()) as { status: string; error?: string; data: { result: { metric: Record<string, string>; value: [number, string] }[] } }
    if (body.status !== 'success') throw new Error(`query ${q} failed: ${body.error}`)
    return body.data.result
  }
  const number: RunningPrometheus['number'] = async (q) => {
    const r = await query(q)
    const v = r.length === 1 ? Number(r[0].value[1]) : Number.NaN
    return Number.isFinite(v) ? v : undefined
  }
  try {
    await waitFor('Prometheus to start', async () => ((await fetch(`http://127.0.0.1:${port}/-/ready`)).ok ? true : undefined))
  } catch (err) {
    await close()
    throw new Error(`${(err as Error).message}; prometheus said: ${log}`)
  }
  const unhealthyRules = async (): Promise<string[]> => {
    const body = (await (await fetch(`${api}/rules`)).json()) as { data: { groups: { rules: { name: string; health: string; lastError?: string }[] }[] } }
    return body.data.groups.flatMap((g) => g.rules.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.health} ${r.lastError ?? ''}`))
  }
  return { api, query, number, unhealthyRules, waitFor, close }
}
