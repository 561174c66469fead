import { deserialize, serialize } from 'node:v8'
import pino from 'pino'
import t from 'tap'
import { LiveStore } from '../../src/admin/live/live-store.ts'
import { OrphanRecorder, ProgressMirror, WorkerProgress } from '../../src/cluster/progress.ts'
import type { ProgressBatch } from '../../src/cluster/progress.ts'
import { eventually } from '../helpers/eventually.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { parseMetrics, sumOf } from '../helpers/prometheus.ts'
import { GeminiLive } from '../../src/realtime/gemini-live.ts'
import { OpenAIRealtime } from '../../src/realtime/openai-realtime.ts'
import type { InFlightVisitor } from '../../src/realtime/protocol.ts'
import { respond, tapedClient } from '../helpers/realtime.ts'
import type { TapedClient } from '../helpers/realtime.ts'

/**
 * What a worker tells its primary of its requests in flight (cluster/progress.ts), on a real
 * proxy's exchanges: the primary's mirror of them, the ones a metrics report covers, and what it
 * records for those no report counts when the worker exits. The batches cross the cluster
 * channel's structured clone (v8 serialize).
 */

const wire = (b: ProgressBatch): ProgressBatch => deserialize(serialize(b)) as ProgressBatch

t.test(
  'a worker’s requests in flight and those ended since its last report are recorded once when it exits: in flight as TOKENTAP_ERR_WORKER_EXITED with their TTFT and tokens, ended as they ended',
  async (t) => {
    const proxy = await startProxy({ routes: [simRoute()] })
    t.teardown(() => proxy.close())
    const active = proxy.app.tokentap.active
    const batches: ProgressBatch[] = []
    const progress = new WorkerProgress(active, (b) => batches.push(wire(b)))
    t.equal(progress.flush(), 0, 'nothing in flight: no batch')
    t.equal(batches.length, 0)

    const controller = new AbortController()
    const stream = (id: string, chunks: [number, number][]): Promise<string> =>
      fetch(`${proxy.url}/sim/v1/chat/completions`, {
        method: 'POST',
        signal: controller.signal,
        headers: { 'content-type': 'application/json', 'x-request-id': id, 'x-tokentap-sim': JSON.stringify({ ttft_ms: 5, chunks }) },
        body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      }).then((r) => r.text())
    const long = Array.from({ length: 600 }, (): [number, number] => [100, 2])
    const open = [stream('a', long), stream('b', long)].map((p) => p.catch(() => ''))
    t.teardown(() => controller.abort())
    // `c` sends its first chunk, then its last 3 s later: seen in flight with a and b (even on a loaded machine), then ended.
    const short = stream('c', [[3000, 1]])
    await eventually(
      'three streams with content',
      () => [...active],
      (xs) => xs.length === 3 && xs.every((x) => x.chunks.count >= 1),
    )
    const first = progress.flush()
    t.equal(first, 1, 'the first batch')
    t.equal(batches[0].meta.length, 3, 'names each request in flight')
    t.ok(batches[0].at.length >= 3, 'with the chunks streamed so far')
    t.equal(progress.flush(), first, 'nothing new: no batch, the same number')

    await short
    await eventually(
      'c recorded',
      () => [...active].length,
      (n) => n === 2,
    )
    await eventually(
      'more chunks of a and b',
      () => [...active].every((x) => x.chunks.count >= 3),
      (done) => done,
    )
    const second = progress.flush()
    t.equal(second, 2)
    t.same(
      batches[1].ended.map((e) => e.key),
      [2],
      'the ended request, with how it ended',
    )

    // One mirror whose worker's last report predates c's end, one whose report covers it.
    const uncovered = new ProgressMirror()
    const covered = new ProgressMirror()
    for (const b of batches) {
      uncovered.onBatch(b, 1)
      covered.onBatch(b, 1)
    }
    uncovered.covered(1, first)
    covered.covered(1, second)
    covered.covered(9, second)
    t.equal(uncovered.size(1), 3, 'c is kept until a report counts it')
    t.equal(covered.size(1), 2, 'a report that counts c lets it go')
    t.equal(covered.size(9), 0)
    t.same(covered.exited(9, 0), [], 'a worker that sent nothing leaves nothing')

    const logs: Record<string, unknown>[] = []
    const logger = pino({ base: undefined }, { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) })
    const live = new LiveStore({ recentRequests: 10, stallSeconds: 1 })
    const recorder = new OrphanRecorder(proxy.config, logger, live)
    const now = performance.now()
    const lost = uncovered.exited(1, now)
    t.equal(uncovered.size(1), 0, 'the mirror forgets the worker')
    recorder.record(lost, 'SIGKILL')
    const text = (await Promise.all(recorder.metrics.all().map(async (m) => Buffer.concat([...m.chunks()]).toString()))).join('\n')
    const m = parseMetrics(text)
    t.equal(sumOf(m, 'llm_requests_total'), 3, 'each request counted once')
    t.equal(sumOf(m, 'llm_requests_total', { outcome: 'error', status_code: '200' }), 2, 'a and b as errors with the status their clients got')
    t.equal(sumOf(m, 'llm_requests_total', { outcome: 'ok', status_code: '200' }), 1, 'c as it ended')
    t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count'), 3, 'with their TTFT')
    t.ok(sumOf(m, 'llm_output_tokens_total') >= 2 * 3 * 2 + 2, 'and the tokens streamed')
    t.ok(sumOf(m, 'llm_inter_chunk_latency_seconds_count') >= 4, 'and the gaps between the chunks the primary had')
    const lines = logs.filter((l) => l.msg === 'request')
    t.same(
      lines.map((l) => [l.request_id, l.error, l.error_detail]),
      [
        ['c', undefined, undefined],
        ['a', 'TOKENTAP_ERR_WORKER_EXITED', 'SIGKILL'],
        ['b', 'TOKENTAP_ERR_WORKER_EXITED', 'SIGKILL'],
      ],
      'a log line each, the reason on the cut ones',
    )
    t.ok(
      lines.slice(1).every((l) => (l.e2e_ms as number) > (l.ttft_ms as number)),
      'whose E2E runs to the death',
    )
    t.same(
      live.stats.failures.map((f) => f.id),
      ['a', 'b'],
      'the live page’s failures list shows the cut ones (c reached it through its worker)',
    )

    // A route the primary does not know (a config changed under it) is still recorded.
    const strays = new ProgressMirror()
    strays.onBatch({ ...batches[0], meta: batches[0].meta.map((x) => ({ ...x, route: '/gone' })) }, 1)
    recorder.record(strays.exited(1, now), 'exit code 1')
    t.equal(logs.filter((l) => l.msg === 'request' && l.route === '/gone').length, 3)
    controller.abort()
    await Promise.all(open)
  },
)

t.test(
  'a worker’s realtime sessions: open ones and their responses in flight are recorded as errors (worker_exited, with TTFT) when it exits, what ended since its last report as it ended, what a report covers never again',
  async (t) => {
    const proxy = await startProxy({ routes: [simRoute()] })
    t.teardown(() => proxy.close())
    const realtime = proxy.app.tokentap.realtime
    const batches: ProgressBatch[] = []
    const progress = new WorkerProgress(proxy.app.tokentap.active, (b) => batches.push(wire(b)), realtime)
    const open = async (id: string): Promise<TapedClient> => {
      const c = tapedClient(`${proxy.url.replace('http', 'ws')}/sim/v1/realtime?model=gpt-realtime`, { headers: { 'x-request-id': id } })
      await c.opened
      return c
    }
    const short = { ttft_ms: 1, first_tokens: 1, chunks: [[1, 1]], audio_ms_per_token: 10 }
    const long = { ttft_ms: 1, first_tokens: 1, chunks: Array.from({ length: 600 }, () => [50, 1]), audio_ms_per_token: 10 }
    const deltas = (c: TapedClient): number => c.messages.filter((m) => m.data.includes('_transcript.delta"')).length

    // a: a response mid-stream; b: one response done, the session open.
    const a = await open('rt-a')
    const b = await open('rt-b')
    t.teardown(() => {
      a.ws.terminate()
      b.ws.terminate()
    })
    a.ws.send(JSON.stringify({ type: 'response.create', tokentap_sim: long }))
    await respond(b, short, 1)
    await eventually(
      'a streaming',
      () => deltas(a),
      (n) => n >= 2,
    )
    const first = progress.flush()
    t.same(
      batches[0].realtime?.sessions.map((s) => [s.id, s.route, s.provider, s.model]),
      [
        ['rt-a', '/sim', 'openai', 'gpt-realtime'],
        ['rt-b', '/sim', 'openai', 'gpt-realtime'],
      ],
      'names each open session',
    )
    t.equal(batches[0].realtime?.responses.length, 1, 'with a’s response in flight')
    t.same(
      batches[0].realtime?.finished.map((f) => f.who.id),
      ['rt-b'],
      'and b’s, recorded',
    )

    // c: a whole session after the first report.
    const c = await open('rt-c')
    await respond(c, short, 1)
    c.ws.close(1000)
    await c.closed
    await eventually(
      'c recorded',
      () => realtime.open.size,
      (n) => n === 2,
    )
    await eventually(
      'a further',
      () => deltas(a),
      (n) => n >= 4,
    )
    const second = progress.flush()
    t.equal(second, first + 1)
    const rt = batches[1].realtime
    t.same(
      rt?.closed.map((x) => [x.who.id, x.outcome]),
      [['rt-c', 'ok']],
      'c ended',
    )
    t.equal(rt?.responses.length, 1, 'a’s response grew')
    t.ok((rt?.responses[0].timeline.gaps.length as number) >= 2 && (rt?.responses[0].timeline.gaps.length as number) < 2 * deltas(a), 'by its new gaps only')

    const uncovered = new ProgressMirror()
    const covered = new ProgressMirror()
    for (const batch of batches) {
      uncovered.onBatch(batch, 1)
      covered.onBatch(batch, 1)
    }
    uncovered.covered(1, first)
    covered.covered(1, second)
    t.same(uncovered.realtime.size(1), { open: 2, responses: 1, ended: 2 }, 'c’s response and session kept until a report counts them')
    t.same(covered.realtime.size(1), { open: 2, responses: 1, ended: 0 })
    t.same(covered.realtime.exited(9, 0, 'TOKENTAP_ERR_WORKER_EXITED'), { open: [], finished: [], closed: [] }, 'a worker that sent nothing leaves nothing')

    const logs: Record<string, unknown>[] = []
    const logger = pino({ base: undefined }, { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) })
    const live = new LiveStore({ recentRequests: 10, stallSeconds: 1 })
    const recorder = new OrphanRecorder(proxy.config, logger, live)
    const now = performance.now()
    const lost = uncovered.realtime.exited(1, now, 'TOKENTAP_ERR_WORKER_EXITED')
    t.same(uncovered.realtime.size(1), { open: 0, responses: 0, ended: 0 }, 'the mirror forgets the worker')
    recorder.recordRealtime(lost, now, 'SIGKILL')
    const text = (await Promise.all(recorder.realtime.all().map(async (m) => Buffer.concat([...m.chunks()]).toString()))).join('\n')
    const m = parseMetrics(text)
    const labels = { route: '/sim', provider: 'openai', model: 'gpt-realtime' }
    t.equal(sumOf(m, 'llm_realtime_sessions_total', { ...labels, outcome: 'error' }), 2, 'a and b: errors')
    t.equal(sumOf(m, 'llm_realtime_sessions_total', { ...labels, outcome: 'ok' }), 1, 'c as it ended')
    t.equal(sumOf(m, 'llm_realtime_responses_total', { ...labels, outcome: 'error', error_type: 'worker_exited' }), 1, 'a’s response in flight: worker_exited')
    t.equal(sumOf(m, 'llm_realtime_responses_total', { ...labels, outcome: 'ok' }), 1, 'c’s as it ended; b’s, covered, not again')
    t.equal(sumOf(m, 'llm_realtime_time_to_first_token_seconds_count', labels), 2, 'with their TTFT')
    t.ok(sumOf(m, 'llm_realtime_inter_token_latency_seconds_count', labels) >= 3, 'and a’s gaps')
    t.same(
      m.filter((s) => s.name === 'llm_realtime_sessions_in_flight').map((s) => s.value),
      [0],
      'none in flight',
    )
    const lines = logs.filter((l) => l.msg === 'realtime session')
    t.same(
      lines.map((l) => [l.request_id, l.error, l.error_detail, l.responses]),
      [
        ['rt-a', 'TOKENTAP_ERR_WORKER_EXITED', 'SIGKILL', 1],
        ['rt-b', 'TOKENTAP_ERR_WORKER_EXITED', 'SIGKILL', 0],
      ],
      'a log line each cut session (c’s came from its worker)',
    )
    t.same(
      live.realtime.message(now).series.map((s) => [s.sessions[0], s.error[0], s.ok[0]]),
      [[2, 1, 0]],
      'the live page counts the cut ones',
    )

    // The sessions end: their responses leave the flight, their sessions close.
    a.ws.close(1000)
    b.ws.close(1000)
    await Promise.all([a.closed, b.closed])
    await eventually(
      'a and b recorded',
      () => realtime.open.size,
      (n) => n === 0,
    )
    progress.flush()
    const third = batches[2].realtime
    t.equal(third?.gone.length, 1, 'a’s response is no longer in flight')
    t.same(third?.closed.map((x) => x.who.id).sort(), ['rt-a', 'rt-b'])
    covered.onBatch(batches[2], 1)
    t.same(covered.realtime.size(1), { open: 0, responses: 0, ended: 3 })
    t.equal(progress.flush(), 3, 'nothing new: no batch')
  },
)

t.test('a realtime response asked for and not begun is sent once with its start; a session whose model becomes known is named again', async (t) => {
  const protocol = new OpenAIRealtime({ countTokens: () => 1, finished: () => {}, model: () => {} })
  const session = {
    seq: 7,
    id: 'rt-x',
    route: { label: '/r' },
    provider: 'openai',
    model: undefined as string | undefined,
    tenant: undefined,
    tReq: 100,
    path: '/v1/realtime',
    forEachResponseInFlight: (visit: InFlightVisitor) => protocol.forEachInFlight(visit),
  }
  const batches: ProgressBatch[] = []
  const progress = new WorkerProgress(new Set(), (b) => batches.push(wire(b)), { open: [session], listen: () => {} })
  protocol.client({ type: 'response.create' }, 150)
  progress.flush()
  t.same(
    batches[0].realtime?.responses.map((r) => [r.session, r.timeline.start, r.timeline.textDeltas]),
    [[7, 150, 0]],
    'its start, no delta',
  )
  t.equal(progress.flush(), 1, 'not again while nothing changes')
  session.model = 'gpt-realtime'
  progress.flush()
  t.same(
    batches[1].realtime?.sessions.map((s) => [s.key, s.model]),
    [[7, 'gpt-realtime']],
  )
  const mirror = new ProgressMirror()
  for (const b of batches) mirror.onBatch(b, 1)
  const lost = mirror.realtime.exited(1, 400, 'TOKENTAP_ERR_WORKER_EXITED')
  t.same(
    lost.open.map((s) => [s.who.model, s.responses.map((r) => [r.start, r.end, r.outcome, r.failure, r.timing.ttft])]),
    [['gpt-realtime', [[150, 400, 'error', 'TOKENTAP_ERR_WORKER_EXITED', undefined]]]],
    'at the exit: an error with no TTFT, under the model named last',
  )
})

t.test('a Gemini turn asked for after another that began and ended between two sends is a new response, not the old one again', async (t) => {
  const protocol = new GeminiLive({ countTokens: () => 1, finished: () => {}, model: () => {} })
  const session = {
    seq: 3,
    id: 'live-x',
    route: { label: '/g' },
    provider: 'gemini',
    model: 'gemini-live',
    tenant: undefined,
    tReq: 0,
    path: '/ws/BidiGenerateContent',
    forEachResponseInFlight: (visit: InFlightVisitor) => protocol.forEachInFlight(visit),
  }
  const batches: ProgressBatch[] = []
  const progress = new WorkerProgress(new Set(), (b) => batches.push(wire(b)), { open: [session], listen: () => {} })
  protocol.client({ clientContent: { turnComplete: true } }, 10)
  progress.flush()
  protocol.server({ serverContent: { modelTurn: { parts: [{ text: 'hi' }] }, turnComplete: true }, usageMetadata: { promptTokenCount: 1, responseTokenCount: 1 } }, 20)
  protocol.client({ clientContent: { turnComplete: true } }, 50)
  progress.flush()
  const [first, second] = batches.map((b) => b.realtime)
  t.same(
    second?.responses.map((r) => r.timeline.start),
    [50],
    'the new one with its own start',
  )
  t.same([...(second?.gone ?? [])], [first?.responses[0].key], 'the old one gone')
  const mirror = new ProgressMirror()
  for (const b of batches) mirror.onBatch(b, 1)
  t.same(
    mirror.realtime.exited(1, 60, 'TOKENTAP_ERR_WORKER_EXITED').open.map((s) => s.responses.map((r) => r.start)),
    [[50]],
  )
})
