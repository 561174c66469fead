import { isDeepStrictEqual } from 'node:util'
import fc from 'fast-check'
import type { Arbitrary } from 'fast-check'

/**
 * Property checks any streaming decoder must pass: splitting a byte stream anywhere gives the
 * same events as reading it whole, and no input makes it throw. A decoder is wrapped as a
 * `DecoderRun` (push bytes, get the events those bytes completed; end, get the rest), so one
 * line covers each format:
 *
 *   t.test('…', (t) => checkDecoder(t, () => runOf(new NdjsonDecoder()), ndjsonStreams))
 */

export interface DecoderRun {
  /** Feed bytes; return the events they completed, in order (any comparable values). */
  push(chunk: Uint8Array): readonly unknown[]
  /** End of stream; return what the end completed (often nothing). */
  end(): readonly unknown[]
}

export type DecoderFactory = () => DecoderRun

/** Every event of `bytes` fed in the given pieces. */
export function decodeInPieces(factory: DecoderFactory, bytes: Uint8Array, cuts: readonly number[]): unknown[] {
  const run = factory()
  const out: unknown[] = []
  let from = 0
  for (const cut of [...cuts, bytes.length]) {
    // Pieces are copies, as reads from a socket are: a decoder must not rely on earlier buffers staying put.
    if (cut > from) out.push(...run.push(Uint8Array.prototype.slice.call(bytes, from, cut)))
    from = Math.max(from, cut)
  }
  out.push(...run.end())
  return out
}

/** A stream and sorted cut points inside it. */
function splitStreams(streams: Arbitrary<Uint8Array>): Arbitrary<{ bytes: Uint8Array; cuts: number[] }> {
  return streams.chain((bytes) =>
    fc.uniqueArray(fc.integer({ min: 0, max: Math.max(0, bytes.length) }), { maxLength: Math.min(64, bytes.length + 1) }).map((cuts) => ({ bytes, cuts: cuts.sort((a, b) => a - b) })),
  )
}

/** Random bytes, biased toward the bytes decoders branch on (line ends, colons, braces, quotes, UTF-8 lead bytes). */
const junkBytes: Arbitrary<Uint8Array> = fc
  .array(fc.oneof(fc.integer({ min: 0, max: 255 }), fc.constantFrom(10, 13, 58, 32, 123, 125, 91, 93, 34, 92, 0xe2, 0xef, 0xbb, 0xbf, 0xf0)), { maxLength: 2048 })
  .map((a) => Uint8Array.from(a))

export interface CheckOptions {
  readonly numRuns?: number
  readonly seed?: number
}

interface Asserter {
  pass(message: string): unknown
}

/**
 * The two properties: (1) for streams from `streams` (and for junk), any split gives the same
 * events as one read and as byte-by-byte reads; (2) random bytes in random pieces never throw.
 * Failures throw fast-check's report (seed and shrunk counterexample) into the test.
 */
export function checkDecoder(t: Asserter, factory: DecoderFactory, streams: Arbitrary<Uint8Array>, options: CheckOptions = {}): void {
  const params = { numRuns: options.numRuns ?? 500, seed: options.seed }
  for (const [label, arb] of [
    ['well-formed streams', streams],
    ['junk', junkBytes],
  ] as const) {
    fc.assert(
      fc.property(splitStreams(arb), ({ bytes, cuts }) => {
        const whole = decodeInPieces(factory, bytes, [])
        const split = decodeInPieces(factory, bytes, cuts)
        const byByte = decodeInPieces(
          factory,
          bytes,
          Array.from({ length: bytes.length }, (_, i) => i),
        )
        if (!isDeepStrictEqual(split, whole)) throw new Error(`split at ${JSON.stringify(cuts)} gave ${JSON.stringify(split)}, whole gave ${JSON.stringify(whole)}`)
        if (!isDeepStrictEqual(byByte, whole)) throw new Error(`byte by byte gave ${JSON.stringify(byByte)}, whole gave ${JSON.stringify(whole)}`)
      }),
      params,
    )
    t.pass(`any split of ${label} gives the same events`)
  }
  fc.assert(
    fc.property(splitStreams(junkBytes), ({ bytes, cuts }) => {
      decodeInPieces(factory, bytes, cuts)
    }),
    params,
  )
  t.pass('random bytes in random pieces never throw')
}
