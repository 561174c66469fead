import t from 'tap'
import type { Test } from 'tap'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { observationsOf } from '../helpers/observe.ts'

/** The error type the recording policy gives a Measurement (OpenTelemetry's `error.type`). */
const errorType = (m: Parameters<typeof observationsOf>[0]): string | undefined => observationsOf(m).errorType
import type { ExchangeFacts } from '../../src/timing/measurement.ts'

/** A log from [ms, tokens, kind?] marks. */
function log(marks: [number, number, MarkKind?][], exact = false): ChunkLog {
  const l = new ChunkLog()
  for (const [at, k, kind] of marks) l.add(at, k, kind ?? MarkKind.text, exact)
  return l
}

const facts = (over: Partial<ExchangeFacts>): ExchangeFacts => ({
  tReq: 0,
  tEnd: 500,
  tHeaders: 40,
  statusCode: 200,
  failure: undefined,
  clientGone: false,
  chunks: new ChunkLog(),
  summary: {},
  stallSeconds: 0.1,
  ...over,
})

const close = (t: Test, got: number | undefined, want: number, msg: string) => t.ok(got !== undefined && Math.abs(got - want) < 1e-9, `${msg}: ${got} ≈ ${want}`)

t.test('an ok stream with provider usage: tokens rescaled to the bill, figures by hand', async (t) => {
  // Estimates 1, 1, 1, 1 (4), provider says 8: each chunk becomes 2.
  const chunks = log([
    [100, 1],
    [110, 1],
    [130, 1],
    [400, 1],
  ])
  const m = measure(facts({ chunks, summary: { usage: { output: 8, input: 12 } }, slo: { ttft_seconds: 0.2, itl_p99_seconds: 0.1 } }))
  t.equal(m.outcome, 'ok')
  t.equal(m.statusCode, 200)
  t.equal(m.outputSource, 'usage')
  t.equal(m.outputTokens, 8)
  t.equal(m.inputTokens, 12)
  t.equal(m.timing.tokens, 8, 'the streamed tokens are the provider count')
  close(t, m.estimateRatio, 0.5, 'estimate 4 ÷ usage 8')
  close(t, m.headersSeconds, 0.04, 'headers at 40 ms')
  close(t, m.timing.ttft, 0.1, 'TTFT')
  close(t, m.timing.tpot, 0.3 / 6, 'TPOT = (400 − 100) ms / (8 − 2)')
  t.equal(m.stalls, 1, 'the 270 ms gap is over 0.1 s')
  // Token-weighted ITL values: 5 ms ×2, 10 ms ×2, 135 ms ×2 → p50 10 ms, p99 135 ms.
  close(t, m.itlP50, 0.01, 'own ITL p50')
  close(t, m.itlP99, 0.135, 'own ITL p99')
  t.equal(m.slo, 'missed', 'ITL p99 135 ms is over the 100 ms bound')
  t.equal(errorType(m), undefined)
})

t.test('per-token events with no reported total are counted exactly: source stream', async (t) => {
  const m = measure(
    facts({
      chunks: log(
        [
          [50, 1],
          [60, 1],
          [70, 1],
        ],
        true,
      ),
    }),
  )
  t.equal(m.outputSource, 'stream')
  t.equal(m.outputTokens, 3)
  t.equal(m.estimateRatio, undefined)
})

t.test('tokenizer estimates with no usage: source estimate', async (t) => {
  const m = measure(
    facts({
      chunks: log([
        [50, 2],
        [60, 3],
      ]),
    }),
  )
  t.equal(m.outputSource, 'estimate')
  t.equal(m.outputTokens, 5)
})

t.test('a client that left is cancelled with 499 when no head was written, and keeps its estimates', async (t) => {
  const chunks = log([
    [50, 1],
    [60, 1],
  ])
  const m = measure(facts({ statusCode: 0, tHeaders: undefined, clientGone: true, chunks, summary: { usage: { output: 10 } } }))
  t.equal(m.outcome, 'cancelled')
  t.equal(m.statusCode, 499)
  t.equal(m.timing.tokens, 2, 'a cut stream is not rescaled to a total it never delivered')
  t.equal(errorType(m), 'cancelled')
})

t.test('a failure decides the outcome whatever the status, and names the error type', async (t) => {
  const m = measure(facts({ failure: 'TOKENTAP_ERR_UPSTREAM_RESET', chunks: log([[50, 1]]) }))
  t.equal(m.outcome, 'error')
  t.equal(m.statusCode, 200, 'the status the client got')
  t.equal(errorType(m), 'TOKENTAP_ERR_UPSTREAM_RESET')
  const none = measure(facts({ failure: 'TOKENTAP_ERR_UPSTREAM_CONNECT', statusCode: 0, tHeaders: undefined }))
  t.equal(none.statusCode, 502, 'no answer at all is recorded as 502')
})

t.test('a provider error event inside a 200 stream is an error, typed provider_error', async (t) => {
  const m = measure(facts({ chunks: log([[50, 1]]), summary: { error: 'overloaded_error' } }))
  t.equal(m.outcome, 'error')
  t.equal(m.providerError, 'overloaded_error')
  t.equal(errorType(m), 'provider_error')
  t.equal(m.slo, undefined, 'no SLO configured: no verdict')
})

t.test('a non-2xx answer is an error typed by its status, and a 4xx is not an SLO miss', async (t) => {
  const m = measure(facts({ statusCode: 404, slo: { ttft_seconds: 1 } }))
  t.equal(m.outcome, 'error')
  t.equal(errorType(m), '404')
  t.equal(m.slo, undefined)
})

t.test("a 429 the embedding app's own hooks answered is error_type policy and no SLO verdict; the provider's 429 is a miss", async (t) => {
  const app = measure(facts({ statusCode: 429, failure: 'TOKENTAP_ERR_APP_ANSWERED', slo: { ttft_seconds: 1 } }))
  t.equal(app.outcome, 'error')
  t.equal(observationsOf(app).errorClass, 'policy')
  t.equal(app.slo, undefined)
  const provider = measure(facts({ statusCode: 429, slo: { ttft_seconds: 1 } }))
  t.equal(observationsOf(provider).errorClass, 'upstream_rate_limited')
  t.equal(provider.slo, 'missed')
})

t.test('an unreadable answer and a parser that gave up are both parse errors', async (t) => {
  t.equal(measure(facts({ unreadable: "no parser for content-type 'x'" })).parseError, "no parser for content-type 'x'")
  t.equal(measure(facts({ summary: { parseError: 'bad json' } })).parseError, 'bad json')
})
