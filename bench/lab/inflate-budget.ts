import { randomBytes } from 'node:crypto'
import { PerformanceObserver, performance } from 'node:perf_hooks'
import { constants, createDeflateRaw } from 'node:zlib'
import { monotonicNow } from '../../src/clock.ts'
import { Opcode, encodeFrame } from '../../src/realtime/frame.ts'
import { RealtimeSession } from '../../src/realtime/session.ts'
import type { RealtimeDeps, SessionSummary } from '../../src/realtime/session.ts'
import type { RouteRuntime } from '../../src/proxy/exchange.ts'
import type { EncodingSelector } from '../../src/tokens/tokenizer.ts'
import { round } from '../stats.ts'

/**
 * The event-loop time a realtime session's measuring side takes per 64 KiB read of compressed
 * client messages (permessage-deflate, context takeover), at compression ratios from audio's to
 * a decompression bomb's, and of uncompressed ones, from audio to texts of tiny tokens whose parse
 * costs far more than their bytes, in one process: (run it with
 * `npm run bench:lab -- inflate-budget [--reads 200] [--runs 5] [--only NAME]`). A read a turn of the event loop:
 * each read is timed around `session.data()` (frame decoding, unmasking, inflating, JSON, the
 * protocol), then the turn after it (the messages the session left for later); the target is
 * ≤ 1 ms of CPU per read at any ratio. `cpu_*` are per read: its turn and the one after it
 * together, the process's CPU (process.cpuUsage, so V8's compiler and GC threads are in it). Each
 * row's reads are run `--runs` times, each time by a fresh session after a full GC (the garbage of
 * building the input and of the run before is not collected inside the reads); a read's figure
 * is its median over the runs, and `runs_p99_ms` the range of the runs' own p99s. `gc_ms`: the GC
 * pauses inside a run's reads. A session whose waiting messages pass its budget stops being
 * measured (`not_measured`), so its later reads cost the decoding alone.
 */

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(name)
  return i < 0 ? dflt : process.argv[i + 1]
}
const READS = Number(arg('--reads', '200'))
const RUNS = Number(arg('--runs', '5'))
/** `--worst N`: each row's N costliest reads (index: median ms), to see where a p99 comes from. */
const WORST = Number(arg('--worst', '0'))
const READ_BYTES = 64 * 1024
const MAX_MESSAGE = 1024 * 1024

/** Compresses messages as a permessage-deflate sender with context takeover: one raw deflate stream, a sync flush per message, its 4-byte tail cut. */
async function compress(messages: readonly string[]): Promise<Buffer[]> {
  const stream = createDeflateRaw({ windowBits: 15 })
  const out: Buffer[] = []
  for (const m of messages) {
    const parts: Buffer[] = []
    const onData = (c: Buffer): void => {
      parts.push(c)
    }
    stream.on('data', onData)
    stream.write(m)
    await new Promise<void>((resolve) => stream.flush(constants.Z_SYNC_FLUSH, () => resolve()))
    stream.off('data', onData)
    const all = Buffer.concat(parts)
    out.push(all.subarray(0, all.length - 4))
  }
  stream.destroy()
  return out
}

/** The messages as they are (sent uncompressed). */
const plain = async (messages: readonly string[]): Promise<Buffer[]> => messages.map((m) => Buffer.from(m))

/** A masked client frame, with RSV1 when compressed. */
function frame(payload: Buffer, compressed: boolean): Buffer {
  const f = encodeFrame(Opcode.text, payload, true)
  if (compressed) f[0] |= 0x40
  return f
}

/** The frames cut into reads of 64 KiB (a frame may span two reads, as on the wire). */
function reads(frames: readonly Buffer[], n: number): Buffer[] {
  const once = Buffer.concat(frames)
  const all = Buffer.concat(Array.from({ length: Math.ceil((n * READ_BYTES) / once.length) }, () => once))
  return Array.from({ length: n }, (_, i) => all.subarray(i * READ_BYTES, (i + 1) * READ_BYTES))
}

const textDelta = (i: number): string => JSON.stringify({ type: 'response.create', event_id: `event_${randomBytes(11).toString('base64url')}`, response: { instructions: ` word${i % 50}` } })
const append = (audio: Buffer): string => JSON.stringify({ type: 'input_audio_buffer.append', event_id: `event_${randomBytes(11).toString('base64url')}`, audio: audio.toString('base64') })
/** A message of about MAX_MESSAGE bytes whose compressed size is about MAX_MESSAGE / `ratio`. */
function ratioMessage(ratio: number): string {
  const random = randomBytes(Math.floor(MAX_MESSAGE / ratio / 1.35)).toString('base64')
  return JSON.stringify({ type: 'input_audio_buffer.append', audio: random + 'A'.repeat(MAX_MESSAGE - 200 - random.length) })
}

/** An event of about `bytes` whose parse costs far more than its bytes: nested arrays. */
const nested = (bytes: number): string => `{"type":"session.update","pad":${'['.repeat((bytes - 40) >> 1)}${']'.repeat((bytes - 40) >> 1)}}`
/** An event of about `bytes` of arrays nested 2,000 deep, side by side (within SteppedJson's MAX_DEPTH). */
function nestedGroups(bytes: number): string {
  const group = `${'['.repeat(2000)}${']'.repeat(2000)}`
  return `{"type":"session.update","pad":[${Array.from({ length: Math.floor((bytes - 40) / 4001) }, () => group).join(',')}]}`
}
/** An event of about `bytes` of distinct keys. */
function keys(bytes: number): string {
  const parts: string[] = []
  for (let n = 40, i = 0; n < bytes; i++) {
    parts.push(`"k${i}":${i}`)
    n += parts[parts.length - 1].length + 1
  }
  return `{"type":"session.update","pad":{${parts.join(',')}}}`
}
/** An event of `n` keys with names no message had before (an attacker's: each new to V8's string table). */
let fresh = 0
function freshKeys(n: number): string {
  const prefix = (fresh++).toString(36)
  return `{"type":"session.update","pad":{${Array.from({ length: n }, (_, i) => `"${prefix}_${i}":${i}`).join(',')}}}`
}
/** An event of about `bytes` whose text is `\n` escapes. */
const escapes = (bytes: number): string => `{"type":"session.update","instructions":"${'\\n'.repeat((bytes - 50) >> 1)}"}`
/** A small event of tiny tokens (1 KiB: 500 numbers). */
const numbers = (): string => `{"type":"session.update","pad":[${Array.from({ length: 490 }, () => '0').join(',')}]}`

/** Each row: its name, whether its messages are compressed, the messages (compressed ones as permessage-deflate payloads). */
const SCENARIOS: readonly [string, boolean, () => Promise<Buffer[]>][] = [
  ['audio appends (speech)', true, () => compress(Array.from({ length: 40 }, () => append(randomBytes(4800))))],
  ['text events', true, () => compress(Array.from({ length: 2000 }, (_, i) => textDelta(i)))],
  ['audio appends (silence)', true, () => compress(Array.from({ length: 400 }, () => append(Buffer.alloc(4800))))],
  ['1 MiB messages at 50×', true, () => compress(Array.from({ length: 4 }, () => ratioMessage(50)))],
  ['1 MiB messages at 150×', true, () => compress(Array.from({ length: 4 }, () => ratioMessage(150)))],
  ['bombs: 1 MiB from 1 KiB', true, () => compress(Array.from({ length: 4 }, () => ratioMessage(1000)))],
  ['uncompressed: speech', false, () => plain(Array.from({ length: 40 }, () => append(randomBytes(4800))))],
  ['uncompressed: text events', false, () => plain(Array.from({ length: 2000 }, (_, i) => textDelta(i)))],
  ['uncompressed: 1 KiB of numbers', false, () => plain(Array.from({ length: 200 }, numbers))],
  ['uncompressed: 64 KiB nested', false, () => plain([nested(64 * 1024)])],
  ['uncompressed: 64 KiB of keys', false, () => plain([keys(64 * 1024)])],
  ['uncompressed: 1 MiB nested', false, () => plain([nested(MAX_MESSAGE - 64)])],
  ['uncompressed: 1 MiB of keys', false, () => plain([keys(MAX_MESSAGE - 64)])],
  // The siblings: fresh key names below the whole parse's limit and above, escapes, the same shapes compressed.
  ['uncompressed: 64 KiB nested 2,000 deep', false, () => plain([nestedGroups(64 * 1024)])],
  ['uncompressed: 1 MiB nested 2,000 deep', false, () => plain([nestedGroups(MAX_MESSAGE - 64)])],
  ['uncompressed: 300 fresh keys', false, () => plain(Array.from({ length: 200 }, () => freshKeys(300)))],
  ['uncompressed: 2,000 fresh keys', false, () => plain(Array.from({ length: 40 }, () => freshKeys(2000)))],
  ['uncompressed: 64 KiB of escapes', false, () => plain([escapes(64 * 1024)])],
  ['uncompressed: 1 MiB of escapes', false, () => plain([escapes(MAX_MESSAGE - 64)])],
  ['64 KiB nested', true, () => compress([nested(64 * 1024)])],
  ['64 KiB of keys', true, () => compress([keys(64 * 1024)])],
  ['1 MiB of keys', true, () => compress([keys(MAX_MESSAGE - 64)])],
  ['2,000 fresh keys', true, () => compress(Array.from({ length: 40 }, () => freshKeys(2000)))],
]

function session(): { s: RealtimeSession; summary: () => SessionSummary | undefined } {
  let summary: SessionSummary | undefined
  const deps: RealtimeDeps = {
    encodings: { counterFor: () => (text: string) => text.length >> 2 } as unknown as EncodingSelector,
    maxMessageBytes: MAX_MESSAGE,
    sessions: new Set(),
    recordResponse: () => {},
    recordSession: (_who, s) => {
      summary = s
    },
    onRecordError: () => {},
  }
  const route: RouteRuntime = { label: '/rt', prefix: '/rt', provider: 'openai', inFlight: 0 }
  const s = new RealtimeSession(deps, route, 'bench', '/v1/realtime', new URLSearchParams(), 0)
  s.opened({ serverNoContextTakeover: false, clientNoContextTakeover: false })
  return { s, summary: () => summary }
}

const gcPauses: [number, number][] = []
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcPauses.push([e.startTime, e.startTime + e.duration])
}).observe({ entryTypes: ['gc'] })
const collect = (globalThis as { gc?: () => void }).gc ?? (() => {})

const quantile = (sorted: readonly number[], q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
console.log(
  `${READS} reads of 64 KiB of client messages per row, ${RUNS} runs of a fresh session each, a read a turn: ms per turn (wall), CPU ms per read (its turn and the next; a read's median over the runs)`,
)
const rows: Record<string, unknown>[] = []
// Warm-up: JIT, zlib. A read a turn, then the session is finished: one left with a backlog went
// on reading it in the turns of the first row measured (thousands of compressed text events).
for (const [, compressed, make] of SCENARIOS.slice(0, 2)) {
  const { s } = session()
  for (const r of reads(
    (await make()).map((m) => frame(m, compressed)),
    20,
  )) {
    s.data('client', r, 0)
    await new Promise<void>((resolve) => setImmediate(resolve))
  }
  s.finish(0)
}
const only = arg('--only', '')
for (const [name, isCompressed, make] of SCENARIOS) {
  if (!name.includes(only)) continue
  const messages = await make()
  const compressed = messages.reduce((n, m) => n + m.length, 0)
  const input = reads(
    messages.map((m) => frame(m, isCompressed)),
    READS,
  )
  const times: number[] = []
  /** CPU ms per read, by run. */
  const runs: number[][] = []
  let gcMs = 0
  let held = 0
  let notMeasured = ''
  const turn = async (work: () => Promise<void> | void): Promise<number> => {
    const c0 = process.cpuUsage()
    const t0 = monotonicNow()
    await work()
    times.push(monotonicNow() - t0)
    const c = process.cpuUsage(c0)
    return (c.user + c.system) / 1000
  }
  for (let r = 0; r < RUNS; r++) {
    const { s, summary } = session()
    const cpu: number[] = []
    // The garbage of building the input (and of the run before) is not collected inside the reads.
    collect()
    await new Promise<void>((resolve) => setImmediate(resolve))
    const from = performance.now()
    for (let i = 0; i < input.length; i++) {
      const read = await turn(() => s.data('client', input[i], i))
      // The turn the session took for the messages it left waiting (queued before this one).
      cpu.push(read + (await turn(() => new Promise<void>((resolve) => setImmediate(resolve)))))
    }
    const to = performance.now()
    // GC entries arrive asynchronously.
    await new Promise<void>((resolve) => setTimeout(resolve, 20))
    gcMs += gcPauses.reduce((n, [a, b]) => n + Math.max(0, Math.min(b, to) - Math.max(a, from)), 0) / RUNS
    gcPauses.length = 0
    held = s.held
    s.finish(READS)
    notMeasured = summary()?.parseError ?? ''
    runs.push(cpu)
  }
  // A read's figure is its median over the runs: the same read costs the same work in every run,
  // what other processes add to one run's figure does not.
  const medians = input.map((_, i) =>
    quantile(
      runs.map((run) => run[i]).sort((a, b) => a - b),
      0.5,
    ),
  )
  if (WORST > 0)
    console.log(
      `${name}: ${medians
        .map((ms, i) => [i, ms])
        .sort((a, b) => b[1] - a[1])
        .slice(0, WORST)
        .map(([i, ms]) => `read ${i} ${round(ms, 2)} ms`)
        .join(', ')}`,
    )
  const cpu = medians.sort((a, b) => a - b)
  const p99s = runs
    .map((run) =>
      quantile(
        [...run].sort((a, b) => a - b),
        0.99,
      ),
    )
    .sort((a, b) => a - b)
  times.sort((a, b) => a - b)
  rows.push({
    messages: name,
    wire_bytes: Math.round(compressed / messages.length),
    turn_p50_ms: round(quantile(times, 0.5), 3),
    turn_max_ms: round(times[times.length - 1], 3),
    cpu_p50_ms: round(quantile(cpu, 0.5), 3),
    cpu_p99_ms: round(quantile(cpu, 0.99), 3),
    cpu_max_ms: round(cpu[cpu.length - 1], 3),
    runs_p99_ms: `${round(p99s[0], 2)}–${round(p99s[p99s.length - 1], 2)}`,
    cpu_total_ms: round(
      cpu.reduce((a, b) => a + b, 0),
      1,
    ),
    gc_ms: round(gcMs, 1),
    held_at_end: held,
    not_measured: notMeasured,
  })
}
console.table(rows)
