import t from 'tap'
import fc from 'fast-check'
import { BedrockParser } from '../../src/parsers/bedrock.ts'
import { OllamaParser } from '../../src/parsers/ollama.ts'
import { TgiParser } from '../../src/parsers/tgi.ts'
import { UsageChunkFilter } from '../../src/proxy/inject-usage.ts'
import type { StreamParser } from '../../src/parsers/types.ts'
import { fixture, parserContext } from '../helpers/feed.ts'

const ctx = parserContext({ maxEventBytes: 4096 })
const PARSERS: [string, () => StreamParser, Buffer][] = [
  ['Ollama', () => new OllamaParser(ctx), fixture('ollama/api-chat-stream.ndjson')],
  ['TGI', () => new TgiParser(ctx), fixture('tgi/generate-stream-native.sse').subarray(0, 3000)],
  ['Bedrock', () => new BedrockParser(ctx), fixture('bedrock/converse-stream-claude-reasoning.eventstream')],
]

/** A recorded stream with some bytes changed, cut into random reads. */
const mangled = (base: Buffer) =>
  fc
    .record({
      flips: fc.array(fc.tuple(fc.nat(base.length - 1), fc.integer({ min: 0, max: 255 })), { maxLength: 8 }),
      cuts: fc.uniqueArray(fc.nat(base.length), { maxLength: 12 }),
    })
    .map(({ flips, cuts }) => {
      const b = Buffer.from(base)
      for (const [at, v] of flips) b[at] = v
      const offsets = [...cuts].sort((x, y) => x - y)
      const pieces: Buffer[] = []
      let last = 0
      for (const o of [...offsets, b.length]) {
        pieces.push(b.subarray(last, o))
        last = o
      }
      return pieces
    })

for (const [name, make, base] of PARSERS) {
  t.test(`the ${name} parser never throws on changed bytes or random reads`, async (t) => {
    fc.assert(
      fc.property(mangled(base), (pieces) => {
        const p = make()
        for (const piece of pieces) p.push(piece)
        p.end()
      }),
      { numRuns: 300 },
    )
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 64 }), { maxLength: 20 }), (pieces) => {
        const p = make()
        for (const piece of pieces) p.push(piece)
        p.end()
      }),
      { numRuns: 300 },
    )
    t.pass()
  })
}

t.test('the usage-chunk filter passes every byte but the usage event, whatever the reads', async (t) => {
  const base = fixture('openai/chat-text-role-first-usage-then-moderation-chunk.sse')
  fc.assert(
    fc.property(mangled(base), (pieces) => {
      const f = new UsageChunkFilter()
      const out = Buffer.concat([...pieces.map((p) => f.push(p)), f.end()])
      const whole = Buffer.concat(pieces)
      // Nothing is added or reordered: the output is the input with one contiguous run cut out,
      // i.e. its common prefix and common suffix with the input cover all of it.
      if (out.length > whole.length) return false
      let prefix = 0
      while (prefix < out.length && out[prefix] === whole[prefix]) prefix++
      let suffix = 0
      while (suffix < out.length && out[out.length - 1 - suffix] === whole[whole.length - 1 - suffix]) suffix++
      return prefix + suffix >= out.length
    }),
    { numRuns: 1500 },
  )
  t.pass()
})
