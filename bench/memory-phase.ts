import type { Job } from './load-client.ts'
import { evenPlan, request, type Target } from './plans.ts'
import { rssBytes } from './proc.ts'
import { round } from './stats.ts'

/**
 * Memory per open stream, repeated: one stream's RSS delta is mostly allocator and heap-page noise,
 * so many streams are measured at once and divided; a Node proxy's heapUsed + external after a
 * full GC (asked of its probe) beside RSS counts live objects only.
 */

export interface MemoryDeps {
  job<T>(job: Job): Promise<T>
  readonly target: Target
  readonly pids: readonly number[]
  /** The proxy's probe (bench/el-probe.ts): `gc` answers heapUsed and external after a full GC. */
  readonly ask?: (cmd: string, reply: string) => Promise<Record<string, number>>
  /** Requests still in flight in the proxy (tokentap's /debug/streams), when it can say. */
  readonly inFlight?: () => Promise<number>
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

/** One path's repeats, per open stream, KiB (`invalid`: repeats left out, their RSS with the streams open below the baseline). */
export async function memoryPhase(d: MemoryDeps, streams: number, repeats: number) {
  const sample = async (): Promise<{ rss: number; held: number }> => {
    let held = NaN
    if (d.ask !== undefined) {
      const m = await d.ask('gc', 'gc-done')
      held = m.heapUsed + m.external
    }
    await sleep(200)
    return { rss: rssBytes(d.pids), held }
  }
  // Until no request is in flight (released streams have finished recording), so a baseline
  // never still holds the previous repeat's streams.
  const idle = async (): Promise<void> => {
    const inFlight = d.inFlight
    if (inFlight === undefined) return sleep(300)
    for (let i = 0; i < 100 && (await inFlight()) > 0; i++) await sleep(100)
  }
  const kib = (bytes: number, n: number): number => round(bytes / n / 1024, 1)
  // Each stream has its first content event and waits for the next (100 ms apart).
  const hold = request(d.target, evenPlan(600, 100))
  const out = { held: [] as number[], rss: [] as number[], invalid: 0, rssBeforeMib: NaN, rssOpenMib: NaN }
  for (let r = 0; r < repeats; r++) {
    await sleep(500)
    await idle()
    const before = await sample()
    const opened = await d.job<number>({ kind: 'hold', ...hold, count: streams })
    await sleep(1500)
    const open = await sample()
    await d.job({ kind: 'release' })
    // Less RSS with the streams open than without: the baseline still held pages of the repeat
    // before, so this repeat's RSS measures nothing and is left out of the median.
    const valid = open.rss >= before.rss
    if (valid) out.rss.push(kib(open.rss - before.rss, opened))
    else out.invalid++
    // Live memory against the state after the streams are gone: leftovers of an earlier repeat
    // still being freed at `before` would otherwise be subtracted from this one. Without an
    // in-flight count, `after` can still hold the aborted streams' leftovers: the lower baseline counts.
    await idle()
    const after = await sample()
    if (d.ask !== undefined && (valid || d.inFlight !== undefined)) out.held.push(kib(open.held - (d.inFlight !== undefined ? after.held : Math.min(before.held, after.held)), opened))
    if (r === 0) {
      out.rssBeforeMib = round(before.rss / 2 ** 20, 1)
      out.rssOpenMib = round(open.rss / 2 ** 20, 1)
    }
  }
  return out
}

export type MemoryRuns = Awaited<ReturnType<typeof memoryPhase>>
