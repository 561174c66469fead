import t from 'tap'
import { judgeSlo } from '../../src/timing/slo.ts'
import type { SloInput } from '../../src/timing/slo.ts'
import type { Timing } from '../../src/timing/request-timing.ts'

const timing = (ttft: number | undefined, e2e = 2): Timing => ({ e2e, ttft, ttfot: ttft, chunks: ttft === undefined ? 0 : 5, tokens: 5, firstTokens: 1, decode: 1, tpot: 0.25, tps: 2.5, maxGap: 0.3 })
const input = (over: Partial<SloInput>): SloInput => ({ outcome: 'ok', statusCode: 200, timing: timing(0.1), itlP99: 0.05, ...over })

t.test('a streamed ok request meets the SLO within both bounds, bounds inclusive', async (t) => {
  const slo = { ttft_seconds: 0.5, itl_p99_seconds: 0.05 }
  t.equal(judgeSlo(slo, input({})), 'met')
  t.equal(judgeSlo(slo, input({ timing: timing(0.5) })), 'met', 'TTFT equal to the bound meets it')
  t.equal(judgeSlo(slo, input({ timing: timing(0.51) })), 'missed', 'TTFT over')
  t.equal(judgeSlo(slo, input({ itlP99: 0.051 })), 'missed', 'ITL P99 over')
  t.equal(judgeSlo(slo, input({ itlP99: undefined })), 'met', 'no ITL observations cannot break the ITL bound')
})

t.test('only the bounds that are set are checked', async (t) => {
  t.equal(judgeSlo({ ttft_seconds: 1 }, input({ itlP99: 9 })), 'met')
  t.equal(judgeSlo({ itl_p99_seconds: 0.1 }, input({ timing: timing(30) })), 'met')
})

t.test('errors are missed, caller errors and answers without content are not judged', async (t) => {
  const slo = { ttft_seconds: 1 }
  t.equal(judgeSlo(slo, input({ outcome: 'error', statusCode: 500, timing: timing(undefined) })), 'missed')
  t.equal(judgeSlo(slo, input({ outcome: 'error', statusCode: 429, timing: timing(undefined) })), 'missed', 'rate limited is a miss')
  t.equal(judgeSlo(slo, input({ outcome: 'error', statusCode: 200 })), 'missed', 'a provider error inside the stream')
  t.equal(judgeSlo(slo, input({ outcome: 'error', statusCode: 400, timing: timing(undefined) })), undefined, 'a bad request is the caller’s')
  t.equal(judgeSlo(slo, input({ timing: timing(undefined) })), undefined, 'an ok answer with no streamed content')
})

t.test('a cancelled request is missed only when it had already broken a bound', async (t) => {
  const slo = { ttft_seconds: 1, itl_p99_seconds: 0.1 }
  t.equal(judgeSlo(slo, input({ outcome: 'cancelled', statusCode: 499 })), undefined)
  t.equal(judgeSlo(slo, input({ outcome: 'cancelled', timing: timing(undefined, 3) })), 'missed', 'waited 3 s for nothing')
  t.equal(judgeSlo(slo, input({ outcome: 'cancelled', timing: timing(undefined, 0.5) })), undefined, 'left before the bound')
  t.equal(judgeSlo(slo, input({ outcome: 'cancelled', itlP99: 0.2 })), 'missed')
})
