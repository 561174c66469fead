import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { replay, sseEvents, startUpstream } from '../helpers/upstream.ts'
import type { Piece } from '../helpers/upstream.ts'
import { feed, fixture, parserContext } from '../helpers/feed.ts'
import { BedrockParser } from '../../src/parsers/bedrock.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { reconcileTokens } from '../../src/timing/request-timing.ts'

/** Reads the whole response body as bytes. */
async function bytesOf(res: Response): Promise<Buffer> {
  return Buffer.from(await res.arrayBuffer())
}

t.test('TGI /generate_stream replayed through the proxy: exact per-token counts, usage, and the very same bytes', async (t) => {
  const body = fixture('tgi/generate-stream-native.sse')
  const events = sseEvents(body.toString('utf8'))
  t.equal(events.length, 150)
  // 15 reads of 10 token events each: the first after 40 ms, then every 20 ms.
  const pieces: Piece[] = []
  for (let i = 0; i < events.length; i += 10) pieces.push({ afterMs: i === 0 ? 40 : 20, bytes: Buffer.from(events.slice(i, i + 10).join('')) })
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    void replay(res, pieces)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/tgi', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const res = await fetch(`${proxy.url}/tgi/generate_stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: 'Write about data science', parameters: { max_new_tokens: 150 } }),
  })
  t.ok((await bytesOf(res)).equals(body), 'the client received the recorded bytes exactly')
  const [line] = await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { provider: 'tgi', model: 'unknown', route: '/tgi' }
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), 149, 'ITL count = N − k1 with one token an event')
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), 149)
  const itlSum = sumOf(m, 'llm_inter_token_latency_seconds_sum', labels)
  // Reads are due at fixed offsets from the replay's start (after t_req) and never go out early,
  // so a late first read shortens the window and a late last one lengthens it, by however much a
  // loaded machine makes them late: t_last − t_first is at least the last read's due time (40 +
  // 14 × 20 ms) − TTFT, and at most E2E − TTFT (the response ends after its last read).
  const ttft = sumOf(m, 'llm_time_to_first_token_seconds_sum', labels)
  const e2e = sumOf(m, 'llm_request_duration_seconds_sum', labels)
  const lastDue = pieces.reduce((s, p) => s + p.afterMs, 0) / 1000
  t.ok(itlSum > 0 && itlSum >= lastDue - ttft - 1e-6 && itlSum <= e2e - ttft + 1e-6, `ITL sum ${itlSum} ≈ 14 × 20 ms: within [${lastDue - ttft}, ${e2e - ttft}]`)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 150, 'details.generated_tokens')
  t.equal(line.chunks, 150)
  t.equal(line.streamed_tokens, 150)
})

t.test('Bedrock ConverseStream replayed through the proxy with frames cut across reads: counts, usage, model from the path, same bytes', async (t) => {
  const body = fixture('bedrock/converse-stream-nova-text.eventstream')
  // Cut every 200 bytes, so most frames arrive in two or three reads; 10 ms apart after 50 ms.
  const pieces: Piece[] = []
  for (let i = 0; i < body.length; i += 200) pieces.push({ afterMs: i === 0 ? 50 : 10, bytes: body.subarray(i, i + 200) })
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream', 'x-amzn-requestid': 'r1' })
    void replay(res, pieces)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/bedrock', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const res = await fetch(`${proxy.url}/bedrock/model/us.amazon.nova-micro-v1%3A0/converse-stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: [{ text: 'hi' }] }] }),
  })
  t.equal(res.headers.get('content-type'), 'application/vnd.amazon.eventstream')
  t.ok((await bytesOf(res)).equals(body), 'the client received the recorded bytes exactly')
  t.equal(upstream.requests[0].url, '/model/us.amazon.nova-micro-v1%3A0/converse-stream', 'the path went upstream as the client wrote it')

  // What N − k1 must be: the stream's 29 chunks, their estimates scaled to the reported 82 tokens.
  const parsed = feed(new BedrockParser(parserContext()), [body])
  const log = new ChunkLog()
  for (const e of parsed.events) log.add(0, e.tokens, MarkKind.text, e.exact)
  reconcileTokens(log, 82)
  const k1 = log.tokens(0)

  const [line] = await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { provider: 'bedrock', model: 'us.amazon.nova-micro-v1:0', route: '/bedrock' }
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), 82 - k1)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 82)
  t.equal(sumOf(m, 'llm_input_tokens_total', labels), 13)
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok' }), 1)
  t.equal(line.chunks, 29)
  t.equal(line.streamed_tokens, 82)
  t.equal(sumOf(m, 'llm_parse_errors_total'), 0)
})

t.test('a Bedrock exception frame mid-stream makes the request an error', async (t) => {
  const body = fixture('bedrock/converse-stream-claude-reasoning.eventstream')
  const { frame, walkFrames } = await import('../helpers/eventstream.ts')
  // Cut after the tenth whole frame, where the exception frame then follows.
  const cut = walkFrames(body)
    .slice(0, 10)
    .reduce((n, f) => n + 16 + f.payload.length + Object.entries(f.headers).reduce((h, [k, v]) => h + 4 + k.length + Buffer.byteLength(v), 0), 0)
  const exception = frame({ ':exception-type': 'modelStreamErrorException', ':content-type': 'application/json', ':message-type': 'exception' }, '{"message":"boom"}')
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream' })
    void replay(res, [
      { afterMs: 10, bytes: body.subarray(0, cut) },
      { afterMs: 10, bytes: exception },
    ])
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/b', upstream: upstream.url, provider: 'bedrock' }] })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.url}/b/model/anthropic.claude-sonnet-4/converse-stream`, { method: 'POST', body: '{}' })
  t.ok((await bytesOf(res)).equals(Buffer.concat([body.subarray(0, cut), exception])))
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { provider: 'bedrock', model: 'anthropic.claude-sonnet-4', outcome: 'error', status_code: '200' }), 1)
})

t.test('an Azure deployment path names the model when the body has none; filter chunks are not content', async (t) => {
  const body = fixture('azure/azure-chat-async-content-filter.sse')
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    void replay(
      res,
      sseEvents(body.toString('utf8')).map((e) => ({ afterMs: 5, bytes: e })),
    )
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/azure', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.url}/azure/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'api-key': 'secret' },
    body: JSON.stringify({ stream: true, messages: [] }),
  })
  t.ok((await bytesOf(res)).equals(body))
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { provider: 'openai', model: 'my-gpt4o', route: '/azure' }
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), 0, 'one content chunk: the filter chunks after it are not content')
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok' }), 1)
})
