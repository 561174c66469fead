import t from 'tap'
import fc from 'fast-check'
import { JsonArrayDecoder } from '../../src/parsers/json-array-decoder.ts'
import type { JsonArraySink } from '../../src/parsers/json-array-decoder.ts'

interface Seen {
  elements: string[]
  oversize: number[]
  invalid: string[]
}

function decode(bytes: Buffer, cuts: readonly number[] = [], max = 1 << 20): Seen {
  const seen: Seen = { elements: [], oversize: [], invalid: [] }
  const sink: JsonArraySink = {
    element: (text) => seen.elements.push(text),
    oversize: (n) => seen.oversize.push(n),
    invalid: (reason) => seen.invalid.push(reason),
  }
  const decoder = new JsonArrayDecoder(max)
  let from = 0
  for (const cut of [...cuts, bytes.length]) {
    if (cut <= from) continue
    decoder.push(Buffer.from(bytes.subarray(from, cut)), sink)
    from = cut
  }
  decoder.end()
  return seen
}

/** Every way to cut `bytes` in two, plus one byte a read. */
function everySplit(bytes: Buffer): number[][] {
  const plans = Array.from({ length: bytes.length - 1 }, (_, i) => [i + 1])
  plans.push(Array.from({ length: bytes.length - 1 }, (_, i) => i + 1))
  return plans
}

t.test('each top-level element comes out as its own text, whitespace and separators as Gemini sends them', async (t) => {
  const body = Buffer.from('[{\n  "a": 1\n}\n,\r\n{\n  "b": "x]}\\"{["\n}\n]')
  const want = ['{\n  "a": 1\n}', '{\n  "b": "x]}\\"{["\n}']
  t.same(decode(body).elements, want)
  for (const cuts of everySplit(body)) {
    const seen = decode(body, cuts)
    if (JSON.stringify(seen.elements) !== JSON.stringify(want)) t.fail(`different at ${cuts.slice(0, 3)}`)
  }
  t.pass('the same elements at every split')
})

t.test('multi-byte characters split across reads come out whole', async (t) => {
  const body = Buffer.from('[{"t":"héllo — 世界 🌍"},{"t":"ok"}]')
  for (const cuts of everySplit(body)) {
    const seen = decode(body, cuts)
    if (JSON.parse(seen.elements[0]).t !== 'héllo — 世界 🌍' || seen.elements.length !== 2) t.fail(`broken at ${cuts[0]}`)
  }
  t.pass()
})

t.test('scalars, strings, nested arrays and an empty array are elements too', async (t) => {
  t.same(decode(Buffer.from('[1, -2.5e3 ,"s\\\\",true,null,[1,[2]],{}]')).elements, ['1', '-2.5e3', '"s\\\\"', 'true', 'null', '[1,[2]]', '{}'])
  t.same(decode(Buffer.from('  []  ')).elements, [])
  t.same(decode(Buffer.from('[]')).invalid, [])
})

t.test('a byte order mark is skipped, even split', async (t) => {
  const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('[{"a":1}]')])
  for (const cuts of everySplit(body)) t.same(decode(body, cuts).elements, ['{"a":1}'])
})

t.test('a bare object (an error body instead of an array) is one element', async (t) => {
  const seen = decode(Buffer.from('{"error":{"code":429,"message":"quota [x]","status":"RESOURCE_EXHAUSTED"}}\n'))
  t.same(
    seen.elements.map((e) => JSON.parse(e)),
    [{ error: { code: 429, message: 'quota [x]', status: 'RESOURCE_EXHAUSTED' } }],
  )
  t.same(seen.invalid, [])
})

t.test('anything else is reported invalid once, and nothing more is read', async (t) => {
  t.equal(decode(Buffer.from('data: {"a":1}')).invalid.length, 1)
  const after = decode(Buffer.from('[{"a":1}] x [{"b":2}]'))
  t.same(after.elements, ['{"a":1}'])
  t.equal(after.invalid.length, 1)
  t.equal(decode(Buffer.from('[}')).invalid.length, 1)
})

t.test('an element over the limit is dropped and reported with its size; the next one still comes', async (t) => {
  const big = `{"t":"${'x'.repeat(100)}"}`
  const body = Buffer.from(`[${big},{"a":1}]`)
  for (const cuts of [[], [10], [10, 50, 90]]) {
    const seen = decode(body, cuts, 64)
    t.same(seen.oversize, [big.length])
    t.same(seen.elements, ['{"a":1}'])
  }
})

t.test('an element cut off by the end of the stream is not reported', async (t) => {
  t.same(decode(Buffer.from('[{"a":1},{"b":')).elements, ['{"a":1}'])
})

t.test('any JSON array, pretty or compact, split anywhere, gives back its elements', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.jsonValue(), { maxLength: 6 }), fc.boolean(), fc.array(fc.nat(), { maxLength: 8 }), (values, pretty, rawCuts) => {
      const body = Buffer.from(pretty ? `[${values.map((v) => JSON.stringify(v, null, 2)).join('\n,\r\n')}\n]` : JSON.stringify(values))
      const cuts = [...new Set(rawCuts.map((c) => (body.length > 1 ? 1 + (c % (body.length - 1)) : 0)))].sort((a, b) => a - b)
      const seen = decode(body, cuts)
      return seen.invalid.length === 0 && JSON.stringify(seen.elements.map((e) => JSON.parse(e))) === JSON.stringify(values)
    }),
    { numRuns: 300 },
  )
  t.pass()
})
