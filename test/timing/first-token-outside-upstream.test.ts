import t from 'tap'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import type { ExchangeFacts } from '../../src/timing/measurement.ts'
import { SLOW_CLIENT_SECONDS } from '../../src/record/observations.ts'
import { observationsOf } from '../helpers/observe.ts'

/** Facts of a request whose headers came at 1000 ms and first content chunk `ttftMs` later (none: no content). */
const facts = (ttftMs: number | undefined, over: Partial<ExchangeFacts> = {}): ExchangeFacts => {
  const chunks = new ChunkLog()
  if (ttftMs !== undefined) chunks.add(1000 + ttftMs, 1, MarkKind.text, false)
  return { tReq: 1000, tEnd: 3000, tHeaders: 1010, statusCode: 200, failure: undefined, clientGone: false, chunks, summary: {}, stallSeconds: 1, ...over }
}

t.test('TTFT minus the reported queue, load and prompt time is the wait outside the upstream', async (t) => {
  // TTFT 750 ms; Groq says 250 ms queued, 125 ms of prompt: 375 ms it does not account for.
  const m = measure(facts(750, { summary: { reported: { queue: 0.25, prompt: 0.125, generation: 2, total: 2.375 } } }))
  t.equal(m.timing.ttft, 0.75)
  t.equal(m.outsideUpstream, 0.375)
  t.same(m.reported, { queue: 0.25, prompt: 0.125, generation: 2, total: 2.375 })
  const o = observationsOf(m)
  t.equal(o.outsideUpstream, 0.375)
  t.same(o.upstreamReported, m.reported)
})

t.test('the phases reported are the ones subtracted: Ollama reports load and prompt, llama.cpp prompt alone', async (t) => {
  t.equal(measure(facts(500, { summary: { reported: { load: 0.25, prompt: 0.125, total: 3 } } })).outsideUpstream, 0.125)
  t.equal(measure(facts(500, { summary: { reported: { prompt: 0.375, generation: 1 } } })).outsideUpstream, 0.125)
})

t.test('no figure without a reported queue, load or prompt time, or without a first token', async (t) => {
  t.equal(measure(facts(500, { summary: { reported: { total: 0.5, generation: 0.25 } } })).outsideUpstream, undefined, 'a total alone says nothing of the first token')
  t.equal(measure(facts(500)).outsideUpstream, undefined, 'nothing reported')
  t.equal(measure(facts(undefined, { summary: { reported: { prompt: 0.1 } } })).outsideUpstream, undefined, 'no content arrived')
})

t.test('an upstream that claims more than the whole wait leaves 0 outside it, never a negative', async (t) => {
  t.equal(measure(facts(100, { summary: { reported: { queue: 0.5, prompt: 0.5 } } })).outsideUpstream, 0)
})

t.test('the client write wait is seconds, for streamed answers only, and slow past 100 ms', async (t) => {
  const slow = measure(facts(100, { clientWriteWaitMs: 2250 }))
  t.equal(slow.clientWriteWait, 2.25)
  t.equal(observationsOf(slow).slowClient, true)
  const fast = measure(facts(100, { clientWriteWaitMs: 0 }))
  t.equal(fast.clientWriteWait, 0, 'a streamed answer that never waited observes 0')
  t.equal(observationsOf(fast).slowClient, false)
  t.equal(observationsOf(measure(facts(100, { clientWriteWaitMs: SLOW_CLIENT_SECONDS * 1000 }))).slowClient, false, 'exactly 100 ms is not over it')
  const whole = measure(facts(undefined))
  t.equal(whole.clientWriteWait, undefined, 'no stream, no observation')
  t.equal(observationsOf(whole).slowClient, undefined)
})
