import { Writable } from 'node:stream'
import pino from 'pino'
import t from 'tap'
import { LabelSlot } from '../../src/record/labels.ts'
import type { Observations } from '../../src/record/observations.ts'
import { Recorder } from '../../src/record/recorder.ts'
import { requestLog, requestLogLine, timeSpentFields } from '../../src/record/request-log.ts'
import { LlmMetrics } from '../../src/metrics/llm/llm-metrics.ts'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import type { Measurement } from '../../src/timing/measurement.ts'
import { observationsOf, testPolicy } from '../helpers/observe.ts'

/** A streamed request of three one-token chunks 100 ms apart, the first at 200 ms; the client left at the end unless `ok`. */
function streamed(ok: boolean): Measurement {
  const log = new ChunkLog()
  for (let i = 0; i < 3; i++) log.add(200 + i * 100, 1, MarkKind.text, false)
  return measure({ tReq: 0, tEnd: 450, tHeaders: 100, statusCode: 200, failure: undefined, clientGone: !ok, chunks: log, summary: {}, stallSeconds: 1 })
}

/** The lines a logger at `level` writes, parsed. */
function capture(level: string): { logger: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>)
      done()
    },
  })
  return { logger: pino({ level }, sink), lines }
}

t.test("a request's log line shows its own figures where the aggregates gate them", async (t) => {
  const o = observationsOf(streamed(false), { id: 'c1' })
  t.equal(o.outcome, 'cancelled')
  t.equal(o.tpot, undefined, 'the TPOT histogram takes ok requests only')
  t.equal(o.measured.tpot, 0.1, 'the request still had one')
  const { logger, lines } = capture('info')
  requestLog(logger)(o)
  logger.flush()
  t.equal(lines.length, 1)
  t.match(lines[0], { level: 30, msg: 'request', request_id: 'c1', outcome: 'cancelled', tpot_ms: 100, chunks: 3, streamed_tokens: 3, output_tokens: 3 })
})

t.test("the log line names where the time went with timeSpentFields' keys, in its order, and a parser's extras come last", async (t) => {
  const base = observationsOf(streamed(true), { id: 'ts' })
  const o: Observations = {
    ...base,
    upstreamReported: { queue: 0.012, prompt: 0.05, total: 0.4 },
    outsideUpstream: 0.002,
    clientWriteWait: 0.001,
    who: { ...base.who, extra: { stop_reason: 'end_turn' } },
  }
  const line = requestLogLine(o)
  const spent = timeSpentFields(o.upstreamReported, o.outsideUpstream, o.clientWriteWait, (s) => (s === undefined ? undefined : Math.round(s * 1e6) / 1e3))
  const keys = Object.keys(line)
  const at = keys.indexOf('upstream_queue_ms')
  t.same(keys.slice(at, at + Object.keys(spent).length), Object.keys(spent), 'the same keys, one after the other, in the same order')
  for (const [k, v] of Object.entries(spent)) t.equal(line[k], v, k)
  t.same([line.upstream_queue_ms, line.upstream_load_ms, line.ttft_outside_upstream_ms], [12, undefined, 2])
  t.equal(keys.at(-1), 'stop_reason', 'the extras after the fixed keys')
  t.equal(line.stop_reason, 'end_turn')
  t.equal(Object.keys(requestLogLine(base)).at(-1), 'span_id', 'no extras: the fixed keys alone')
})

t.test('a failed request is logged as a warning, and nothing is built below the level', async (t) => {
  const failed = measure({ tReq: 0, tEnd: 50, tHeaders: 40, statusCode: 503, failure: undefined, clientGone: false, chunks: new ChunkLog(), summary: {}, stallSeconds: 1 })
  const o = observationsOf(failed, { id: 'e1' })
  t.equal(o.outcome, 'error')
  t.equal(o.outputTokens, undefined, 'no output reported or streamed: no count for the aggregates')
  const warn = capture('warn')
  requestLog(warn.logger)(o)
  requestLog(warn.logger)(observationsOf(streamed(true), { id: 'ok' }))
  warn.logger.flush()
  t.same(
    warn.lines.map((l) => [l.level, l.request_id, l.status, l.output_tokens]),
    [[40, 'e1', 503, 0]],
    'the error at warn with its own count of 0; the ok request below the level is not written',
  )
})

t.test('the recorder asks the policy once and hands the same Observations to each sink in order', async (t) => {
  const seen: [string, Observations][] = []
  const recorder = new Recorder(testPolicy(), [(o) => seen.push(['first', o])], () => t.fail('no error'))
  recorder.add((o) => seen.push(['added', o]))
  const who = observationsOf(streamed(true), { id: 'r1' }).who
  recorder.record(who, streamed(true))
  t.same(
    seen.map(([name]) => name),
    ['first', 'added'],
  )
  t.equal(seen[0][1], seen[1][1], 'one Observations object')
  t.equal(seen[0][1].who, who)
  const errors: unknown[] = []
  const failing = new Recorder(testPolicy(), [], (err) => errors.push(err))
  failing.onRecordError(new Error('x'), who)
  t.equal(errors.length, 1, 'a recording error goes to the handler given')
})

t.test('one label-set cache: the same labels are one LabelSet, and each sink has its own slot on it', async (t) => {
  const policy = testPolicy()
  const a = policy.labels.of('openai', '/r', 'm', undefined)
  t.equal(policy.labels.of('openai', '/r', 'm', undefined), a, 'the cache gives the same set')
  t.same(a.values, ['openai', 'm', '/r'])
  const one = new LabelSlot<string>()
  const two = new LabelSlot<number>()
  t.equal(one.get(a), undefined)
  one.put(a, 'x')
  two.put(a, 2)
  t.equal(one.get(a), 'x')
  t.equal(two.get(a), 2)
  const B = DEFAULT_BUCKETS
  const metrics = new LlmMetrics({ ttft: B.ttft, itl: B.itl, inter_chunk: B.itl, tpot: B.itl, e2e: B.e2e, tps: B.tps, max_gap: B.max_gap }, () => {})
  metrics.record(observationsOf(streamed(true), { id: 'a' }, policy))
  metrics.record(observationsOf(streamed(true), { id: 'b' }, policy))
  t.equal(metrics.families.ttft.seriesCount, 1, 'one TTFT series for the set')
  t.equal([...metrics.families.ttft.entries()][0].count, 2, 'both requests observed on it')
})
