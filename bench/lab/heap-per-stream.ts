import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { ChildProcess } from 'node:child_process'
import type { Job } from '../load-client.ts'
import { evenPlan, request, warmUpJob } from '../plans.ts'
import { pidOf, rssBytes, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from '../proc.ts'

/**
 * The benchmark's memory-per-open-stream figure alone (bench/memory-phase.ts, tokentap's part),
 * in under a minute instead of the whole benchmark:
 * `npm run bench:lab -- heap-per-stream [--runs 3] [--streams 1000] [--relay] [--snapshot]`.
 * Same processes (simulator, tokentap with the el-probe under --expose-gc, load generator) and the
 * same streams: each past its first content event, then 100 ms between chunks. Per stream:
 * heapUsed + external after a full GC with the streams open minus the same once they are gone,
 * and VmRSS open minus before. `--relay` measures the plain Node relay (bench/node-relay.ts) too.
 * `--snapshot` adds a run that writes a heap snapshot in the proxy before and with the streams open and prints
 * what the open streams added, by node type and constructor (count and self size per stream);
 * the snapshots are kept (the directory is printed) for DevTools' comparison view.
 */

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i < 0 ? undefined : process.argv[i + 1]
}
const RUNS = Number(argOf('--runs') ?? 3)
const STREAMS = Number(argOf('--streams') ?? 1000)
const RELAY = process.argv.includes('--relay')
const SNAPSHOT = process.argv.includes('--snapshot')

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
const kib = (bytes: number): number => Math.round((bytes / STREAMS / 1024) * 10) / 10
const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]

type Ask = (cmd: string, reply: string) => Promise<Record<string, number>>

/** Asks the el-probe for a heap snapshot at `file` (written synchronously, then the reply). */
function snapshot(proc: ChildProcess, file: string): Promise<void> {
  return new Promise((res) => {
    const on = (m: { cmd?: string }): void => {
      if (m.cmd !== 'snapshot-done') return
      proc.off('message', on)
      res()
    }
    proc.on('message', on)
    proc.send({ cmd: 'snapshot', file })
  })
}

interface Tally {
  count: number
  size: number
}

/** Self sizes by `type name` (strings and code by type only) of one snapshot. */
function tally(file: string): Map<string, Tally> {
  const snap = JSON.parse(readFileSync(file, 'utf8')) as { snapshot: { meta: { node_fields: string[]; node_types: [string[]] } }; nodes: number[]; strings: string[] }
  const fields = snap.snapshot.meta.node_fields
  const types = snap.snapshot.meta.node_types[0]
  const width = fields.length
  const [fType, fName, fSize] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f))
  const out = new Map<string, Tally>()
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + fType]]
    const named = type === 'object' || type === 'closure' || type === 'native' || type === 'hidden' || type === 'array'
    const key = named ? `${type} ${snap.strings[snap.nodes[i + fName]].slice(0, 60)}` : type
    const t = out.get(key) ?? { count: 0, size: 0 }
    t.count++
    t.size += snap.nodes[i + fSize]
    out.set(key, t)
  }
  return out
}

function printDiff(before: Map<string, Tally>, open: Map<string, Tally>): void {
  const rows: { key: string; count: number; size: number }[] = []
  for (const [key, t] of open) {
    const b = before.get(key) ?? { count: 0, size: 0 }
    rows.push({ key, count: (t.count - b.count) / STREAMS, size: (t.size - b.size) / STREAMS })
  }
  rows.sort((a, b) => b.size - a.size)
  const total = rows.reduce((a, r) => a + r.size, 0)
  process.stdout.write(`snapshot: self size added per open stream ${(total / 1024).toFixed(2)} KiB\n`)
  for (const r of rows.slice(0, 60)) {
    if (Math.abs(r.size) < 16) break
    process.stdout.write(`${r.size.toFixed(0).padStart(7)} B ${r.count.toFixed(2).padStart(6)}×  ${r.key}\n`)
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-heap-'))
  const sim = await startPortPrinter(join(DIST, 'src', 'sim', 'cli.js'), [])
  stopOnExit(sim.proc)
  const tt = await startTokentap(DIST, dir, sim.port, { maxModels: 100 })
  stopOnExit(tt.proc)
  // tokentap's requests in flight and their content chunks so far (/debug/streams).
  const streams = async (): Promise<{ n: number; chunks: number }> => {
    const r = (await (await fetch(`http://127.0.0.1:${tt.adminPort}/debug/streams`)).json()) as { in_flight: number; streams: { chunks: number }[] }
    return { n: r.in_flight, chunks: r.streams.reduce((a, s) => a + s.chunks, 0) }
  }
  const paths: { name: string; url: string; pid: number; ask: Ask; proc: ChildProcess; streams?: typeof streams }[] = [
    { name: 'tokentap', url: `http://127.0.0.1:${tt.port}/t/v1/chat/completions`, pid: pidOf(tt.proc), ask: tt.ask, proc: tt.proc, streams },
  ]
  if (RELAY) {
    const relay = await startPortPrinter(join(DIST, 'bench', 'node-relay.js'), ['--upstream', `http://127.0.0.1:${sim.port}`], join(DIST, 'bench', 'el-probe.js'))
    stopOnExit(relay.proc)
    paths.push({ name: 'node-relay', url: `http://127.0.0.1:${relay.port}/v1/chat/completions`, pid: pidOf(relay.proc), ask: relay.ask, proc: relay.proc })
  }
  const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  stopOnExit(load.proc)
  const job = <T>(j: Job): Promise<T> => load.job<T>(j)

  for (const p of paths) {
    await job(warmUpJob(p.url, `warm-${p.name}`))
    const sample = async (): Promise<{ heap: number; external: number; rss: number }> => {
      const m = await p.ask('gc', 'gc-done')
      await sleep(200)
      return { heap: m.heapUsed, external: m.external, rss: rssBytes([p.pid]) }
    }
    // As the memory phase: until no request is in flight, so a baseline never holds the streams before it.
    const idle = async (): Promise<void> => {
      if (p.streams === undefined) return sleep(2500)
      for (let i = 0; i < 100 && (await p.streams()).n > 0; i++) await sleep(100)
    }
    const figures = { held: [] as number[], heap: [] as number[], external: [] as number[], rss: [] as number[], chunks: [] as number[] }
    // With --snapshot, one more run after the measured ones takes the snapshots: a snapshot's own
    // collection drops caches a full GC keeps (≈ 4 KiB a stream of it here), which would skew its run's figures.
    for (let r = 0; r < RUNS + (SNAPSHOT ? 1 : 0); r++) {
      const snapshotting = r === RUNS
      await sleep(1000)
      await idle()
      const before = await sample()
      const snapBefore = join(dir, `before-${r}.heapsnapshot`)
      if (snapshotting) await snapshot(p.proc, snapBefore)
      const t0 = performance.now()
      const opened = await job<number>({ kind: 'hold', ...request(p.url, evenPlan(600, 100)), count: STREAMS, timeoutMs: 60_000 })
      if (opened !== STREAMS) throw new Error(`${p.name}: ${opened} of ${STREAMS} streams opened`)
      const openingMs = performance.now() - t0
      await sleep(1500)
      const open = await sample()
      // Each stream's chunk log grows with its age (8 bytes a mark, its first page doubling from 8
      // marks): the longer the streams took to open, the more every stream holds at this sample.
      const chunks = p.streams === undefined ? NaN : (await p.streams()).chunks / STREAMS
      const snapOpen = join(dir, `open-${r}.heapsnapshot`)
      if (snapshotting) await snapshot(p.proc, snapOpen)
      await job({ kind: 'release' })
      await idle()
      const after = await sample()
      if (snapshotting) {
        printDiff(tally(snapBefore), tally(snapOpen))
        continue
      }
      figures.held.push(kib(open.heap + open.external - after.heap - after.external))
      figures.heap.push(kib(open.heap - after.heap))
      figures.external.push(kib(open.external - after.external))
      figures.rss.push(kib(open.rss - before.rss))
      figures.chunks.push(Math.round(chunks))
      process.stdout.write(
        `${p.name} run ${r + 1}: heap+external ${figures.held.at(-1)} KiB/stream (heap ${figures.heap.at(-1)}, external ${figures.external.at(-1)}), RSS ${figures.rss.at(-1)}; after − before: heap+external ${kib(after.heap + after.external - before.heap - before.external)}; opened in ${Math.round(openingMs)} ms, ${figures.chunks.at(-1)} chunks a stream at the sample\n`,
      )
    }
    process.stdout.write(
      `${p.name} median of ${RUNS}: heap+external ${median(figures.held)} KiB/stream (heap ${median(figures.heap)}, external ${median(figures.external)}), RSS ${median(figures.rss)} KiB/stream, ${median(figures.chunks)} chunks a stream\n`,
    )
  }
  if (SNAPSHOT) process.stdout.write(`snapshots kept in ${dir}\n`)
  else rmSync(dir, { recursive: true, force: true })
  process.exit(0)
}

await main()
