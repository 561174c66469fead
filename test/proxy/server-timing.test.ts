import { request as httpRequest } from 'node:http'
import OpenAI from 'openai'
import t from 'tap'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'

const PLAN = {
  ttft_ms: 20,
  first_tokens: 1,
  chunks: [
    [10, 1],
    [10, 2],
    [30, 1],
  ] as [number, number][],
}
const body = JSON.stringify({ model: 'gpt-4o-mini', stream: true, stream_options: { include_usage: true }, messages: [] })

/** A node:http request that reads the response's trailers. */
function get(url: string, headers: Record<string, string>): Promise<{ headers: Record<string, string | string[] | undefined>; trailers: Record<string, string | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      let text = ''
      res.setEncoding('utf8').on('data', (c: string) => (text += c))
      res.on('end', () => resolve({ headers: res.headers, trailers: res.trailers, body: text }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

const figures = (value: string): Record<string, string> =>
  Object.fromEntries(
    value
      .split(', ')
      .map((p) => p.split(';'))
      .map(([name, v]) => [name, v.split('=')[1]]),
  )

t.test('server_timing adds a Server-Timing trailer with the log line figures when the client sends TE: trailers', async (t) => {
  const proxy = await startProxy({ routes: [{ ...simRoute(), server_timing: true }] })
  t.teardown(() => proxy.close())
  const res = await get(`${proxy.url}/sim/v1/chat/completions`, { te: 'trailers', ...simPlan(PLAN).headers })
  t.equal(res.headers.trailer, 'Server-Timing')
  const value = res.trailers['server-timing']
  t.type(value, 'string')
  const [line] = await proxy.waitForRequests(1)
  const f = figures(value as string)
  t.equal(Number(f.ttft), line.ttft_ms, 'TTFT as the log line has it')
  t.equal(Number(f['itl-p99']), line.itl_p99_ms, 'the request’s own ITL P99')
  t.equal(Number(f.tokens), 5)
  t.equal(f['tokens-source'], 'usage')
  t.equal(line.output_tokens, 5)
})

t.test('without TE: trailers, or with the setting off, the answer is the upstream’s alone', async (t) => {
  const proxy = await startProxy({ routes: [{ ...simRoute(), server_timing: true }, simRoute('/plain')] })
  t.teardown(() => proxy.close())
  const noTe = await get(`${proxy.url}/sim/v1/chat/completions`, simPlan(PLAN).headers)
  t.equal(noTe.headers.trailer, undefined)
  t.same(noTe.trailers, {})
  const off = await get(`${proxy.url}/plain/v1/chat/completions`, { te: 'trailers', ...simPlan(PLAN).headers })
  t.equal(off.headers.trailer, undefined)
  t.equal(off.headers['x-tokentap-request-id'], undefined, 'no id header unless asked for')
  t.same(off.trailers, {})
})

t.test('echo_request_id tells the caller the id its figures are kept under, readable from the OpenAI SDK raw response', async (t) => {
  const proxy = await startProxy({ routes: [{ ...simRoute(), echo_request_id: true }] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test' })
  const { data: stream, response } = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [], stream: true }, simPlan(PLAN)).withResponse()
  for await (const _ of stream) {
    // drain
  }
  const id = response.headers.get('x-tokentap-request-id')
  const [line] = await proxy.waitForRequests(1)
  t.equal(id, line.request_id)
  const given = await get(`${proxy.url}/sim/v1/chat/completions`, { 'x-request-id': 'caller-42', ...simPlan(PLAN).headers })
  t.equal(given.headers['x-tokentap-request-id'], 'caller-42', "the client's own id comes back")
})
