import { readFileSync, readdirSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Job } from '../load-client.ts'
import { SHORT_CHUNKS, SHORT_CONCURRENCY, evenPlan, requestBody, warmUpJob } from '../plans.ts'
import { mainThreadCpuMicros, startLoadClient, startPortPrinter, stopOnExit } from '../proc.ts'
import { round } from '../stats.ts'
import { spread } from '../verdict.ts'
import { startTraceSink } from './trace-sink.ts'

/**
 * What spans add to a request with the process held equal
 * (`npm run bench:lab -- traces-same-process [--pairs 400] [--requests 500] [--warm 20000] [--ratio 0.1]`):
 * one process (two-tokentaps.ts) serves `/off` without spans and `/on` with them; the short
 * requests go to one and then the other in phases of `--requests`, which goes first alternating,
 * and each phase's CPU is read from every thread's schedstat (ns, where /proc/PID/stat counts 10 ms
 * ticks). What the bench's traces round compares across two fresh processes (the code loaded and
 * compiled, the export's thread, the heap's layout) is shared here and cancels out: what is left
 * is the work a request with spans on adds. Prints the ratio of the totals and the median and
 * quartiles of the pairs' ratios, for the process and for its main thread.
 */

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(name)
  return i < 0 ? fallback : Number(process.argv[i + 1])
}
const PAIRS = arg('--pairs', 400)
const REQUESTS = arg('--requests', 500)
const WARM = arg('--warm', 20_000)
const RATIO = arg('--ratio', 0.1)

const here = dirname(fileURLToPath(import.meta.url))
const dist = resolve(here, '..', '..')

/** Every thread's CPU time of a process, µs. */
function processMicros(pid: number): number {
  let us = 0
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      us += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1000
    } catch {
      // A thread that ended between the listing and the read.
    }
  }
  return us
}

async function main(): Promise<void> {
  const sink = await startTraceSink()
  const load = startLoadClient(join(dist, 'bench', 'load-client.js'))
  const sim = await startPortPrinter(join(dist, 'src', 'sim', 'cli.js'), [])
  stopOnExit(sim.proc)
  const proxy = await startPortPrinter(join(here, 'two-tokentaps.js'), ['--upstream', `http://127.0.0.1:${sim.port}`, '--traces', sink.url, '--ratio', String(RATIO)])
  stopOnExit(proxy.proc)
  const pid = proxy.proc.pid
  if (pid === undefined) throw new Error('the proxy process has no pid')
  const body = requestBody(evenPlan(SHORT_CHUNKS, 0))
  const url = (side: string): string => `http://127.0.0.1:${proxy.port}/${side}/v1/chat/completions`
  const streams = (side: string, count: number, id: string): Job => ({
    kind: 'streams',
    url: url(side),
    body,
    count,
    concurrency: SHORT_CONCURRENCY,
    phaseMs: 0,
    idPrefix: id,
    detail: false,
  })
  for (const side of ['off', 'on']) await load.job(warmUpJob(url(side), `w-${side}`))
  for (let i = 0; i < 4; i++) for (const side of ['off', 'on']) await load.job(streams(side, WARM / 4, `w-${side}-${i}`))
  await new Promise((r) => setTimeout(r, 2000))

  const totals = { off: 0, on: 0, offMain: 0, onMain: 0 }
  const ratios: number[] = []
  const mainRatios: number[] = []
  for (let k = 0; k < PAIRS; k++) {
    const phase = { off: { all: 0, main: 0 }, on: { all: 0, main: 0 } }
    for (const side of k % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
      const all0 = processMicros(pid)
      const main0 = mainThreadCpuMicros(pid)
      await load.job(streams(side, REQUESTS, `r-${side}-${k}`))
      phase[side] = { all: processMicros(pid) - all0, main: mainThreadCpuMicros(pid) - main0 }
    }
    totals.off += phase.off.all
    totals.on += phase.on.all
    totals.offMain += phase.off.main
    totals.onMain += phase.on.main
    ratios.push(phase.on.all / phase.off.all)
    mainRatios.push(phase.on.main / phase.off.main)
  }
  const n = PAIRS * REQUESTS
  const all = spread(ratios)
  const main = spread(mainRatios)
  console.log(
    `spans on at ${RATIO} against off, in one process, ${PAIRS} pairs of ${REQUESTS} requests after ${WARM}: ` +
      `${round(totals.off / n, 1)} and ${round(totals.on / n, 1)} µs a request = ${round(totals.on / totals.off, 3)} × ` +
      `(pairs: median ${round(all.median, 3)}, quartiles ${round(all.q1, 3)}–${round(all.q3, 3)}); ` +
      `main thread ${round(totals.offMain / n, 1)} and ${round(totals.onMain / n, 1)} = ${round(totals.onMain / totals.offMain, 3)} × ` +
      `(median ${round(main.median, 3)}, ${round(main.q1, 3)}–${round(main.q3, 3)}); ${sink.exports()} exports received`,
  )
  for (const p of [sim.proc, proxy.proc, load.proc]) p.kill('SIGKILL')
  await sink.close()
}

await main()
