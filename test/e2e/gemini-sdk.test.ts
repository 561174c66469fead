import t from 'tap'
import { GoogleGenAI } from '@google/genai'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { FIRST_TOKENS, N, PLAN, checkStreamMetrics, normalise, startDirectSim } from '../helpers/provider-e2e.ts'

const MODEL = 'gemini-2.5-flash'
const planHeaders = { 'x-tokentap-sim': JSON.stringify(PLAN) }

async function streamChunks(ai: GoogleGenAI): Promise<{ chunks: unknown[]; text: string; output?: number }> {
  const stream = await ai.models.generateContentStream({ model: MODEL, contents: 'count', config: { httpOptions: { headers: planHeaders } } })
  const chunks: unknown[] = []
  let text = ''
  let output: number | undefined
  for await (const chunk of stream) {
    // The SDK attaches the HTTP response (headers with a Date) to each chunk: not stream content.
    const { sdkHttpResponse: _, ...content } = chunk
    chunks.push(content)
    text += chunk.text ?? ''
    output = chunk.usageMetadata?.candidatesTokenCount ?? output
  }
  return { chunks, text, output }
}

t.test('the official Google Gen AI SDK streams (SSE) through the proxy and every metric matches the schedule', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const direct = await startDirectSim()
  t.teardown(() => direct.close())
  const ai = new GoogleGenAI({ apiKey: 'goog-secret-key', httpOptions: { baseUrl: `${proxy.url}/sim` } })

  const REQUESTS = 3
  const received: string[] = []
  for (let r = 0; r < REQUESTS; r++) {
    const { chunks, text, output } = await streamChunks(ai)
    t.equal(text.split(' ').length - 1, N, 'the client received every token')
    t.equal(output, N, 'the client received the usage')
    received.push(normalise(chunks))
  }
  const straight = await streamChunks(new GoogleGenAI({ apiKey: 'k', httpOptions: { baseUrl: direct.url } }))
  for (const r of received) t.equal(r, normalise(straight.chunks), 'through the proxy the client gets the very chunks it gets directly')

  const lines = await proxy.waitForRequests(REQUESTS)
  await checkStreamMetrics(t, proxy, { provider: 'gemini', model: MODEL, route: '/sim' }, REQUESTS)
  for (const line of lines) {
    t.equal(line.model, MODEL, 'the model comes from the path')
    t.equal(line.output_source, 'usage')
    t.notMatch(JSON.stringify(line), /goog-secret-key/, 'the API key (header or query) is never logged')
  }
})

t.test('the JSON-array stream (no alt=sse) passes through byte for byte and is measured incrementally', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const direct = await startDirectSim()
  t.teardown(() => direct.close())
  const path = `/v1beta/models/${MODEL}:streamGenerateContent`
  const post = async (base: string): Promise<Buffer> => {
    const res = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...planHeaders },
      body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'count' }] }] }),
    })
    t.match(res.headers.get('content-type'), /^application\/json/)
    return Buffer.from(await res.arrayBuffer())
  }
  const through = await post(`${proxy.url}/sim`)
  const straight = await post(direct.url)
  t.equal(through.toString('utf8').replace(/sim\d+/g, 'simN'), straight.toString('utf8').replace(/sim\d+/g, 'simN'), 'the same bytes, but for the request-numbered id')
  t.equal(through.length, straight.length)
  await proxy.waitForRequests(1)
  await checkStreamMetrics(t, proxy, { provider: 'gemini', model: MODEL, route: '/sim' }, 1)
})

t.test('a whole generateContent answer counts its usage with no first-token time', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const ai = new GoogleGenAI({ apiKey: 'k', httpOptions: { baseUrl: `${proxy.url}/sim` } })
  const answer = await ai.models.generateContent({ model: MODEL, contents: 'hi', config: { httpOptions: { headers: planHeaders } } })
  t.equal(answer.usageMetadata?.candidatesTokenCount, N)
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { provider: 'gemini', model: MODEL }
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), N)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 0)
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { ...labels, outcome: 'ok' }), 1)
})

t.test('a Gemini error inside the stream makes the request an error', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const ai = new GoogleGenAI({ apiKey: 'k', httpOptions: { baseUrl: `${proxy.url}/sim` } })
  await t.rejects(async () => {
    const stream = await ai.models.generateContentStream({ model: MODEL, contents: 'hi', config: { httpOptions: { headers: { 'x-tokentap-sim': JSON.stringify({ ...PLAN, error_after: 1 }) } } } })
    for await (const _ of stream) {
      // drain until the SDK raises the error chunk
    }
  })
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.error, 'INTERNAL')
  t.equal(line.streamed_tokens, FIRST_TOKENS, 'the first chunk was measured before the error')
})
