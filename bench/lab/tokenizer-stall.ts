import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { counterFor, Encoding, ReadBudget } from '../../src/tokens/tokenizer.ts'
import { monotonicNow } from '../../src/clock.ts'
import { round } from '../stats.ts'

/**
 * The event-loop time counting may take per read, in one process: (run it with
 * `npm run bench:lab -- tokenizer-stall [--reads 40]`). Each read is 64 KiB of OpenAI chat events whose
 * text is one script with no spaces or punctuation (the worst case for BPE: one pre-token), or
 * ordinary English, in events of 8 KiB and of 256 characters. A fresh request (ReadBudget) and a
 * fresh parser each time, so no memo or template helps; the target is ≤ 1 ms per read.
 */

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(name)
  return i < 0 ? dflt : process.argv[i + 1]
}
const READS = Number(arg('--reads', '40'))
const READ_BYTES = 64 * 1024

/** `n` characters of a script, varied (a repeated character would make BPE's job easy). */
function run(from: number, span: number, n: number, seed: number): string {
  let s = ''
  let x = seed
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0
    s += String.fromCodePoint(from + (x % span))
  }
  return s
}

const SCRIPTS: readonly [string, (n: number, seed: number) => string][] = [
  ['CJK', (n, seed) => run(0x4e00, 20_000, n, seed)],
  ['Hangul', (n, seed) => run(0xac00, 11_000, n, seed)],
  ['Cyrillic', (n, seed) => run(0x0430, 32, n, seed)],
  ['Latin letters', (n, seed) => run(0x61, 26, n, seed)],
  ['Thai', (n, seed) => run(0x0e01, 46, n, seed)],
  ['emoji', (n, seed) => run(0x1f600, 80, n, seed)],
  ['English', (n, seed) => 'The quick brown fox jumps over the lazy dog, again and again. '.repeat(Math.ceil(n / 62) + 1).slice(seed % 7, (seed % 7) + n)],
]

const event = (text: string): string =>
  `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"finish_reason":null}]}\n\n`

/** One 64 KiB read of events carrying `chars` characters each. */
function read(make: (n: number, seed: number) => string, chars: number, seed: number): Buffer {
  const parts: Buffer[] = []
  let bytes = 0
  for (let i = 0; bytes < READ_BYTES; i++) {
    const b = Buffer.from(event(make(chars, seed + i)))
    parts.push(b)
    bytes += b.length
  }
  return Buffer.concat(parts).subarray(0, READ_BYTES)
}

const counter = counterFor(Encoding.o200k_base)
/** What one read costs: the whole push (parse + count) and the counting alone, in ms. */
function measureRead(bytes: Buffer): { push: number; cpu: number; count: number; estimated: number } {
  const budget = new ReadBudget(counter, monotonicNow)
  let counting = 0
  const countTokens = (text: string): number => {
    const t0 = monotonicNow()
    const n = budget.count(text)
    counting += monotonicNow() - t0
    return n
  }
  const parser = new OpenAIChatParser({ countTokens, path: '/v1/chat/completions', contentType: 'text/event-stream', maxEventBytes: 1 << 20 })
  budget.newRead()
  const cpu0 = process.cpuUsage()
  const t0 = monotonicNow()
  parser.push(bytes)
  const push = monotonicNow() - t0
  const cpu = process.cpuUsage(cpu0)
  parser.end()
  return { push, cpu: (cpu.user + cpu.system) / 1000, count: counting, estimated: budget.estimated }
}

const quantile = (sorted: readonly number[], q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
console.log(`${READS} reads of 64 KiB per row, each a new request: ms of event-loop time per read (wall: counting alone, the whole read; CPU of the whole read)`)
const rows: Record<string, unknown>[] = []
for (const [name, make] of SCRIPTS) {
  for (const chars of [8192, 256]) {
    measureRead(read(make, chars, 999_999)) // warm-up: JIT, the tokenizer's tables
    const push: number[] = []
    const count: number[] = []
    const cpu: number[] = []
    let estimated = 0
    for (let r = 0; r < READS; r++) {
      const m = measureRead(read(make, chars, r * 1000))
      push.push(m.push)
      count.push(m.count)
      cpu.push(m.cpu)
      estimated += m.estimated
    }
    push.sort((a, b) => a - b)
    count.sort((a, b) => a - b)
    cpu.sort((a, b) => a - b)
    rows.push({
      script: name,
      event_chars: chars,
      count_p50_ms: round(quantile(count, 0.5), 3),
      count_p95_ms: round(quantile(count, 0.95), 3),
      read_p50_ms: round(quantile(push, 0.5), 3),
      read_p95_ms: round(quantile(push, 0.95), 3),
      read_cpu_p95_ms: round(quantile(cpu, 0.95), 3),
      estimated_tokens: Math.round(estimated / READS),
    })
  }
}
console.table(rows)
