import t from 'tap'
import { NdjsonDecoder } from '../../src/parsers/ndjson-decoder.ts'

function decode(pieces: (string | Buffer)[], max?: number): { lines: string[]; oversize: number[] } {
  const d = new NdjsonDecoder(max)
  const lines: string[] = []
  const oversize: number[] = []
  for (const p of pieces)
    d.push(
      typeof p === 'string' ? Buffer.from(p) : p,
      (l) => lines.push(l),
      (n) => oversize.push(n),
    )
  d.end(
    (l) => lines.push(l),
    (n) => oversize.push(n),
  )
  return { lines, oversize }
}

t.test('lines end in LF or CRLF and blank lines are skipped', async (t) => {
  t.same(decode(['{"a":1}\n{"b":2}\r\n\n  \r\n{"c":3}\n']).lines, ['{"a":1}', '{"b":2}', '{"c":3}'])
})

t.test('a split at every byte gives the same lines, multi-byte characters included', async (t) => {
  const body = Buffer.from('{"t":"héllo ✓"}\r\n{"t":"𝄞"}\n{"done":true}\n')
  const whole = decode([body]).lines
  t.equal(whole.length, 3)
  for (let i = 0; i <= body.length; i++) {
    for (let j = i; j <= body.length; j += 5) {
      t.same(decode([body.subarray(0, i), body.subarray(i, j), body.subarray(j)]).lines, whole, `split at ${i} and ${j}`)
    }
  }
})

t.test('a last line without its newline is read at the end', async (t) => {
  t.same(decode(['{"a":1}\n{"done":', 'true}']).lines, ['{"a":1}', '{"done":true}'])
})

t.test('a line over the limit is dropped and reported, and the next line is read', async (t) => {
  const long = 'x'.repeat(50)
  t.same(decode([`${long}\n{"ok":1}\n`], 20), { lines: ['{"ok":1}'], oversize: [50] })
  t.same(decode([long.slice(0, 10), long.slice(10), '\n{"ok":1}\n'], 20), { lines: ['{"ok":1}'], oversize: [50] })
  t.same(decode([long.slice(0, 10), long.slice(10, 15), `${long.slice(15)}\n{"ok":1}\n`], 20), { lines: ['{"ok":1}'], oversize: [50] })
  t.same(decode(['{"ok":1}\n', long], 20), { lines: ['{"ok":1}'], oversize: [50] }, 'an unterminated long line at the end')
})
