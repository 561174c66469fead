import t from 'tap'
import { TokentapError } from '../../src/errors.ts'
import type { FailureCode } from '../../src/errors.ts'
import { Exchange } from '../../src/proxy/exchange.ts'
import type { RouteRuntime } from '../../src/proxy/exchange.ts'
import type { RequestFacts } from '../../src/record/observations.ts'
import { failurePrevails, gatewayStatusFailure, upstreamFailure } from '../../src/proxy/upstream-errors.ts'
import type { Measurement } from '../../src/timing/measurement.ts'
import { EncodingSelector } from '../../src/tokens/tokenizer.ts'

/** A real Exchange on a fixed clock; `finish` hands back what it recorded. */
function exchange(): { ex: Exchange; recorded: () => { who: RequestFacts; m: Measurement } } {
  let out: { who: RequestFacts; m: Measurement } | undefined
  const route: RouteRuntime = { label: 'r', prefix: '/r', provider: 'openai', inFlight: 0 }
  const ex = new Exchange(
    {
      encodings: new EncodingSelector([]),
      now: () => 0,
      maxEventBytes: 1 << 20,
      stallSeconds: 1,
      active: new Set(),
      record: (who, m) => {
        out = { who, m }
      },
      onRecordError: (err) => {
        throw err
      },
    },
    route,
    'id',
    'POST',
    '/v1/chat/completions',
    0,
  )
  return {
    ex,
    recorded: () => {
      ex.finish(10, false)
      if (out === undefined) throw new Error('not recorded')
      return out
    },
  }
}

t.test("the proxy's own decision is recorded whichever order the failures are reported in", async (t) => {
  for (const order of [
    ['TOKENTAP_ERR_UPSTREAM_RESET', 'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT'],
    ['TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT', 'TOKENTAP_ERR_UPSTREAM_RESET'],
  ] as const) {
    const { ex, recorded } = exchange()
    ex.fail(order[0], order[0] === 'TOKENTAP_ERR_UPSTREAM_RESET' ? 'ECONNRESET' : undefined)
    ex.fail(order[1], order[1] === 'TOKENTAP_ERR_UPSTREAM_RESET' ? 'ECONNRESET' : undefined)
    const { who, m } = recorded()
    t.equal(m.failure, 'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT', order.join(' then '))
    t.equal(who.failureDetail, undefined, 'with its own detail, not the observed failure’s')
  }
})

t.test('between two observed failures, or two decisions, the first reported is kept', async (t) => {
  const observed = exchange()
  observed.ex.fail('TOKENTAP_ERR_UPSTREAM_CONNECT', 'ECONNREFUSED')
  observed.ex.fail('TOKENTAP_ERR_UPSTREAM_RESET', 'ECONNRESET')
  t.equal(observed.recorded().m.failure, 'TOKENTAP_ERR_UPSTREAM_CONNECT')
  t.equal(observed.ex.failure, 'TOKENTAP_ERR_UPSTREAM_CONNECT')
  const decided = exchange()
  decided.ex.fail('TOKENTAP_ERR_CLIENT_BODY_TIMEOUT')
  decided.ex.fail('TOKENTAP_ERR_UPSTREAM_TIMEOUT')
  t.equal(decided.recorded().m.failure, 'TOKENTAP_ERR_CLIENT_BODY_TIMEOUT')
})

t.test('every deadline, limit and the shutdown is a decision; what the upstream did is an observation', async (t) => {
  const decisions: FailureCode[] = [
    'TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT',
    'TOKENTAP_ERR_UPSTREAM_TIMEOUT',
    'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT',
    'TOKENTAP_ERR_CLIENT_BODY_TIMEOUT',
    'TOKENTAP_ERR_BODY_TOO_LARGE',
    'TOKENTAP_ERR_UPSTREAM_BAD_RESPONSE',
    'TOKENTAP_ERR_SHUTTING_DOWN',
    'TOKENTAP_ERR_APP_ANSWERED',
  ]
  const observations: FailureCode[] = ['TOKENTAP_ERR_UPSTREAM_CONNECT', 'TOKENTAP_ERR_UPSTREAM_FAILED', 'TOKENTAP_ERR_UPSTREAM_RESET', 'TOKENTAP_ERR_INTERNAL']
  for (const d of decisions) {
    t.ok(failurePrevails(d, undefined), `${d} is kept when nothing failed yet`)
    for (const o of observations) {
      t.ok(failurePrevails(d, o), `${d} replaces ${o}`)
      t.notOk(failurePrevails(o, d), `${o} does not replace ${d}`)
    }
  }
})

t.test('an upstream error before the head maps to connect, headers timeout or failed, with its code as the detail', async (t) => {
  const limits = { headers_timeout_ms: 1500, idle_timeout_ms: 9000 }
  const coded = (code: string, cause = false): Error => Object.assign(new Error('x'), cause ? { cause: { code } } : { code })
  const refused = upstreamFailure(coded('ECONNREFUSED'), false, limits)
  t.same([refused.code, refused.detail], ['TOKENTAP_ERR_UPSTREAM_CONNECT', 'ECONNREFUSED'])
  const connectTimeout = upstreamFailure(coded('UND_ERR_CONNECT_TIMEOUT', true), false, limits)
  t.same([connectTimeout.code, connectTimeout.detail], ['TOKENTAP_ERR_UPSTREAM_CONNECT', 'UND_ERR_CONNECT_TIMEOUT'], 'a socket code under `cause` counts')
  const headers = upstreamFailure(coded('UND_ERR_HEADERS_TIMEOUT'), false, limits)
  t.same([headers.code, headers.message, headers.detail], ['TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT', 'the upstream sent no response headers within 1500 ms', undefined])
  const other = upstreamFailure(new Error('socket hang up'), false, limits)
  t.same([other.code, other.message, other.detail], ['TOKENTAP_ERR_UPSTREAM_FAILED', 'the upstream request failed: socket hang up', undefined])
  const own = new TokentapError('TOKENTAP_ERR_UPSTREAM_TIMEOUT', 5)
  t.equal(upstreamFailure(own, false, limits), own, "the proxy's own abort is its own failure")
})

t.test('an upstream error after the head is a reset, or an idle timeout for a body timeout', async (t) => {
  const reset = upstreamFailure(Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }), true, undefined)
  t.same([reset.code, reset.detail], ['TOKENTAP_ERR_UPSTREAM_RESET', 'UND_ERR_SOCKET'])
  const bare = upstreamFailure(new Error('aborted'), true, undefined)
  t.same([bare.code, bare.detail], ['TOKENTAP_ERR_UPSTREAM_RESET', 'aborted'], 'without a code the message is the detail')
  const body = upstreamFailure(Object.assign(new Error('x'), { code: 'UND_ERR_BODY_TIMEOUT' }), true, { headers_timeout_ms: 1, idle_timeout_ms: 9000 })
  t.same([body.code, body.detail], ['TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])
})

t.test("a gateway's own error status maps to connect (503), headers timeout (504), else failed", async (t) => {
  t.same([503, 504, 502, 500, undefined].map(gatewayStatusFailure), [
    'TOKENTAP_ERR_UPSTREAM_CONNECT',
    'TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT',
    'TOKENTAP_ERR_UPSTREAM_FAILED',
    'TOKENTAP_ERR_UPSTREAM_FAILED',
    'TOKENTAP_ERR_UPSTREAM_FAILED',
  ])
})
