import { deserialize, serialize } from 'node:v8'
import t from 'tap'
import { EXACT_ITL_GAPS, ITL_SCHEMA, ResponseTimeline, sessionOutcome, timelineCursor } from '../../src/timing/realtime-timing.ts'
import type { TimelineProgress } from '../../src/timing/realtime-timing.ts'
import { near } from '../helpers/virtual-time.ts'

t.test('a text response: TTFT from the start to the first delta, ITL token-weighted between deltas, no audio figures', async (t) => {
  // Asked at 1000 ms; deltas of 1, 3 and 2 tokens at 1250, 1310 and 1410 ms.
  const r = new ResponseTimeline(1000)
  r.text(1250, 1)
  r.text(1310, 3)
  r.text(1410, 2)
  const timing = r.timing()
  t.ok(near(timing.ttft as number, 0.25))
  t.equal(timing.ttfa, undefined)
  t.equal(timing.underrun, undefined)
  t.equal(timing.itl.length, 2)
  // 60 ms over 3 tokens, then 100 ms over 2.
  t.ok(near(timing.itl[0][0], 0.02) && timing.itl[0][1] === 3)
  t.ok(near(timing.itl[1][0], 0.05) && timing.itl[1][1] === 2)
  t.equal(timing.streamedTokens, 6)
  t.equal(timing.textDeltas, 3)
})

t.test('an audio response: TTFT is the first of audio and transcript, TTFA the first audio', async (t) => {
  const r = new ResponseTimeline(0)
  r.text(180, 1)
  r.audio(200, 0.3)
  const timing = r.timing()
  t.ok(near(timing.ttft as number, 0.18))
  t.ok(near(timing.ttfa as number, 0.2))
})

t.test('audio arriving as fast as it plays has no underrun; gaps longer than the queued audio add up', async (t) => {
  // 300 ms of audio every 300 ms: the queue never empties.
  const steady = new ResponseTimeline(0)
  for (let i = 0; i < 5; i++) steady.audio(100 + i * 300, 0.3)
  t.ok(near(steady.timing().underrun as number, 0))
  t.ok(near(steady.timing().audioSeconds, 1.5))

  // Playing starts at 100: 200 ms queued until 300. Next at 500: 200 ms silent, queue to 600.
  // Next at 550 (early: queued to 700). Next at 1000: 300 ms silent.
  const slow = new ResponseTimeline(0)
  slow.audio(100, 0.2)
  slow.audio(500, 0.1)
  slow.audio(550, 0.1)
  slow.audio(1000, 0.5)
  t.ok(near(slow.timing().underrun as number, 0.5), `underrun ${slow.timing().underrun}`)

  // Faster than real time builds a buffer that covers a later stall: 1 s of audio at once, then a 700 ms gap.
  const buffered = new ResponseTimeline(0)
  buffered.audio(0, 1)
  buffered.audio(700, 0.2)
  t.ok(near(buffered.timing().underrun as number, 0))
})

t.test('an unknown start leaves TTFT and TTFA out, the rest is measured', async (t) => {
  const r = new ResponseTimeline(undefined)
  r.audio(10, 0.1)
  r.audio(400, 0.1)
  const timing = r.timing()
  t.equal(timing.ttft, undefined)
  t.equal(timing.ttfa, undefined)
  t.ok(near(timing.underrun as number, 0.29))
  t.notOk(new ResponseTimeline(0).produced)
  t.ok(r.produced)
})

t.test('a delta of no tokens adds no ITL observation', async (t) => {
  const r = new ResponseTimeline(0)
  r.text(10, 1)
  r.text(20, 0)
  r.text(40, 2)
  t.same(
    r.timing().itl.map(([v, w]) => [Math.round(v * 1e6), w]),
    [[10_000, 2]],
  )
})

t.test('every gap of a response of 100,000 text deltas counts, in bounded memory: the first ones exactly, later ones by bucket', async (t) => {
  const long = new ResponseTimeline(0)
  // Gaps of 10 ms, then from delta 50,001 on 40 ms, two tokens a delta after the first.
  let at = 0
  for (let i = 0; i < 100_000; i++) {
    at += i <= 50_000 ? 10 : 40
    long.text(at, i === 0 ? 1 : 2)
  }
  const timing = long.timing()
  const weight = timing.itl.reduce((n, [, w]) => n + w, 0)
  t.equal(weight, 2 * 99_999, 'each of the 99,999 gaps counts with its two tokens')
  t.equal(timing.streamedTokens, 1 + 2 * 99_999)
  t.same(
    timing.itl.slice(0, EXACT_ITL_GAPS).map(([v, w]) => [Math.round(v * 1e9), w]),
    Array.from({ length: EXACT_ITL_GAPS }, () => [5_000_000, 2]),
    'the first gaps as they came',
  )
  const later = timing.itl.slice(EXACT_ITL_GAPS)
  t.equal(later.length, 2, 'the later gaps are two buckets')
  const within = 2 ** (2 ** -ITL_SCHEMA) - 1
  t.ok(Math.abs(later[0][0] - 0.005) / 0.005 < within && later[0][1] === 2 * (50_000 - EXACT_ITL_GAPS), `5 ms, within ${within}`)
  t.ok(Math.abs(later[1][0] - 0.02) / 0.02 < within && later[1][1] === 2 * 49_999, '20 ms')
})

t.test('gaps of no time (deltas of one read) past the exact ones count in the zero bucket', async (t) => {
  const r = new ResponseTimeline(0)
  for (let i = 0; i < EXACT_ITL_GAPS + 11; i++) r.text(5, 1)
  const itl = r.timing().itl
  t.equal(itl.length, EXACT_ITL_GAPS + 1)
  t.same(itl[EXACT_ITL_GAPS], [0, 10])
})

t.test('a timeline mirrored from its progress in another process has its figures: every gap once, times shifted, each send bounded by what came since', async (t) => {
  const shift = 1_000_000
  const source = new ResponseTimeline(100)
  const mirror = new ResponseTimeline(100 + shift)
  const cursor = timelineCursor()
  // The cluster channel's structured clone.
  const send = (): TimelineProgress | undefined => {
    const p = source.progress(cursor)
    return p === undefined ? undefined : (deserialize(serialize(p)) as TimelineProgress)
  }
  const sizes: number[] = []
  let at = 100
  // 12,000 deltas (past the exact gaps) of text and audio with gaps of 7 ms, then 25 ms, sent every 500.
  for (let i = 0; i < 12_000; i++) {
    at += i < 6_000 ? 7 : 25
    if (i % 3 === 0) source.audio(at, 0.01)
    else source.text(at, 1 + (i % 2))
    if (i % 500 === 499) {
      const p = send() as TimelineProgress
      sizes.push(p.gaps.length / 2)
      mirror.apply(p, shift)
    }
  }
  t.equal(send(), undefined, 'nothing new: nothing to send')
  const a = source.timing()
  const b = mirror.timing()
  t.same({ ...b, itl: [] }, { ...a, itl: [] }, 'TTFT, TTFA, underrun, audio, deltas and tokens as the source’s')
  t.same(b.itl.slice(0, EXACT_ITL_GAPS), a.itl.slice(0, EXACT_ITL_GAPS), 'the exact gaps as they came')
  const weight = (itl: readonly (readonly [number, number])[]): number => itl.reduce((n, [, w]) => n + w, 0)
  t.equal(weight(b.itl), weight(a.itl), 'every later gap once')
  t.same(b.itl.slice(EXACT_ITL_GAPS), a.itl.slice(EXACT_ITL_GAPS), 'in the same buckets')
  t.ok(Math.max(...sizes) <= 500, `each send carries at most the gaps since the last (${Math.max(...sizes)})`)
  t.ok((sizes.at(-1) as number) <= 4, `past the exact gaps, one pair per bucket that changed (${sizes.at(-1)} for the last 333 gaps)`)

  const asked = new ResponseTimeline(5)
  const empty = asked.progress(timelineCursor()) as TimelineProgress
  const seen = new ResponseTimeline(5 + shift)
  seen.apply(empty, shift)
  t.same(seen.timing(), asked.timing(), 'a response with no delta yet: its start only')
})

t.test('how a session ended: the close handshake, who went first, the proxy', async (t) => {
  const base = { refused: false, abrupt: false, firstClose: undefined }
  t.equal(sessionOutcome({ ...base, refused: true, first: 'upstream' }), 'error', 'a refused upgrade')
  t.equal(sessionOutcome({ ...base, first: 'upstream', firstClose: { from: 'client', code: 1000 } }), 'ok')
  t.equal(sessionOutcome({ ...base, first: 'upstream', firstClose: { from: 'upstream', code: 1001 } }), 'ok')
  t.equal(sessionOutcome({ ...base, first: 'upstream', firstClose: { from: 'client', code: undefined } }), 'ok', 'a close without a code')
  t.equal(sessionOutcome({ ...base, first: 'upstream', firstClose: { from: 'client', code: 4000 } }), 'ok', "an application's own code")
  t.equal(sessionOutcome({ ...base, first: 'upstream', firstClose: { from: 'upstream', code: 1011 } }), 'error', 'an internal error')
  t.equal(sessionOutcome({ ...base, first: 'upstream', firstClose: { from: 'client', code: 1007 } }), 'error', 'invalid payload')
  t.equal(sessionOutcome({ ...base, first: 'client', abrupt: true }), 'cancelled', 'the client went away without a close frame')
  t.equal(sessionOutcome({ ...base, first: 'upstream', abrupt: true }), 'error', 'the upstream went away without one')
  t.equal(sessionOutcome({ ...base, first: 'proxy', proxyReason: 'idle' }), 'error', 'the idle timeout')
  t.equal(sessionOutcome({ ...base, first: 'proxy', proxyReason: 'shutdown' }), 'ok', 'closed by a shutdown (1001)')
})
