import t from 'tap'
import fc from 'fast-check'
import { SseDecoder } from '../../src/parsers/sse-decoder.ts'
import { checkDecoder, decodeInPieces } from '../helpers/split-property.ts'
import type { DecoderRun } from '../helpers/split-property.ts'

/** The SSE decoder as a DecoderRun: events as [event, data], oversized ones as ['oversize']. */
function sseRun(maxEventBytes?: number): () => DecoderRun {
  return () => {
    const decoder = new SseDecoder(maxEventBytes)
    let out: unknown[] = []
    const onEvent = (event: string, data: string): void => void out.push([event, data])
    const onOversize = (): void => void out.push(['oversize'])
    const take = (): unknown[] => {
      const events = out
      out = []
      return events
    }
    return {
      push(chunk) {
        decoder.push(chunk, onEvent, onOversize)
        return take()
      },
      end() {
        decoder.end()
        return take()
      },
    }
  }
}

// Values with multi-byte characters (2, 3 and 4 bytes in UTF-8), colons and spaces.
const value = fc.string({ unit: fc.constantFrom('a', 'b', ' ', ':', 'é', '€', '😀', '"', '{', '}', 'data', '\t'), maxLength: 40 })
const eol = fc.constantFrom('\n', '\r', '\r\n')
const line = fc.oneof(
  { weight: 5, arbitrary: value.map((v) => `data: ${v}`) },
  { weight: 2, arbitrary: value.map((v) => `data:${v}`) },
  { weight: 1, arbitrary: fc.constant('data') },
  { weight: 2, arbitrary: value.map((v) => `event: ${v}`) },
  { weight: 1, arbitrary: value.map((v) => `id: ${v}`) },
  { weight: 1, arbitrary: fc.nat(10_000).map((n) => `retry: ${n}`) },
  { weight: 1, arbitrary: value.map((v) => `:${v}`) },
  { weight: 1, arbitrary: value.map((v) => `x-unknown${v.replace(/:/g, '')}: 1`) },
  { weight: 3, arbitrary: fc.constant('') },
)
/** Event streams: any mix of fields, comments, blank lines and line ends, maybe a BOM. */
const sseStreams = fc
  .tuple(fc.boolean(), fc.array(fc.tuple(line, eol), { maxLength: 40 }))
  .map(([bom, lines]) => new Uint8Array(Buffer.from((bom ? '\uFEFF' : '') + lines.map(([l, e]) => l + e).join(''))))

t.test('any split of an event stream gives the same events, and random bytes never throw', async (t) => {
  checkDecoder(t, sseRun(), sseStreams)
})

t.test('with a small event limit, any split gives the same events and the same oversize reports', async (t) => {
  checkDecoder(t, sseRun(64), sseStreams)
})

t.test('the properties see real events: a known stream decodes to its events', async (t) => {
  const bytes = new Uint8Array(Buffer.from('\uFEFFevent: a\r\ndata: 1\r\ndata: €\r\n\r\n: ping\n\ndata: 😀\r\rdata: cut'))
  t.same(decodeInPieces(sseRun(), bytes, [1, 2, 5, 17, 18, 30]), [
    ['a', '1\n€'],
    ['', '😀'],
  ])
})

t.test('the split property catches a decoder that forgets a partial line between reads', async (t) => {
  // A naive line splitter: each read is split on LF on its own.
  const naive = (): DecoderRun => ({
    push: (chunk) => Buffer.from(chunk).toString('latin1').split('\n').slice(0, -1),
    end: () => [],
  })
  t.throws(() => checkDecoder({ pass: () => {} }, naive, sseStreams, { numRuns: 200 }), 'fast-check finds a split that changes the events')
})
