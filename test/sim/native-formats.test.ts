import t from 'tap'
import type { Test } from 'tap'
import type { AddressInfo } from 'node:net'
import { buildSimulator } from '../../src/sim/sim-app.ts'
import { validateConfig } from '../../src/config/load-config.ts'
import type { SimulatorConfig } from '../../src/config/schema.ts'
import { OllamaParser } from '../../src/parsers/ollama.ts'
import { TgiParser } from '../../src/parsers/tgi.ts'
import { feed, parserContext } from '../helpers/feed.ts'
import { simRoute } from '../helpers/proxy.ts'

async function startSim(t: Test): Promise<string> {
  const cfg = validateConfig({ routes: [simRoute()] }).routes[0].simulator as SimulatorConfig
  const sim = buildSimulator(cfg)
  await sim.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => sim.close())
  return `http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`
}

const plan = {
  ttft_ms: 5,
  first_tokens: 2,
  chunks: [
    [5, 1],
    [5, 3],
  ],
}
/** The Ollama line and whole-answer fields these tests read. */
interface OllamaLine {
  done: boolean
  eval_count: number
  eval_duration: number
  prompt_eval_count: number
  message: { content: string }
  response: string
}
/** The TGI event and whole-answer fields these tests read. */
interface TgiAnswer {
  details: unknown
  generated_text: string
}
const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(plan), ...headers }, body: JSON.stringify(body) })

t.test('the simulator streams Ollama /api/chat and /api/generate as NDJSON with the planned usage', async (t) => {
  const url = await startSim(t)
  for (const api of ['chat', 'generate']) {
    const res = await post(`${url}/api/${api}`, api === 'chat' ? { model: 'llama3.2', messages: [{ role: 'user', content: 'hi' }] } : { model: 'llama3.2', prompt: 'hi' })
    t.equal(res.headers.get('content-type'), 'application/x-ndjson')
    const bytes = Buffer.from(await res.arrayBuffer())
    const lines = bytes
      .toString()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as OllamaLine)
    t.equal(lines.length, 4, 'three content lines and the done line')
    const last = lines[3]
    t.equal(last.done, true)
    t.equal(last.eval_count, 6)
    t.ok(last.eval_duration > 0 && last.prompt_eval_count >= 1)
    if (api === 'chat') t.equal(lines[0].message.content.split(' ').length - 1, 2)
    else t.equal(lines[2].response.split(' ').length - 1, 3)
    const r = feed(new OllamaParser(parserContext()), [bytes])
    t.same(
      r.events.map((e) => e.tokens),
      [2, 1, 3],
      'every simulated word is one token',
    )
    t.equal(r.summary.usage?.output, 6)
    t.equal(r.summary.model, 'llama3.2')
  }
})

t.test('the simulator answers Ollama stream:false whole, errors inside the stream, and error statuses', async (t) => {
  const url = await startSim(t)
  const whole = (await (await post(`${url}/api/chat`, { stream: false, messages: [] })).json()) as OllamaLine
  t.equal(whole.done, true)
  t.equal(whole.eval_count, 6)
  t.equal(whole.message.content.split(' ').length - 1, 6)
  const gen = (await (await post(`${url}/api/generate`, { stream: false, prompt: 'x' })).json()) as OllamaLine
  t.equal(gen.response.split(' ').length - 1, 6)
  const errored = await (await post(`${url}/api/chat`, {}, { 'x-tokentap-sim': JSON.stringify({ ...plan, error_after: 1 }) })).text()
  t.same(
    errored
      .trim()
      .split('\n')
      .map((l) => Object.keys(JSON.parse(l))),
    [['model', 'created_at', 'message', 'done'], ['error']],
  )
  const failed = await post(`${url}/api/chat`, {}, { 'x-tokentap-sim': JSON.stringify({ status: 503 }) })
  t.equal(failed.status, 503)
  t.same(await failed.json(), { error: 'simulated 503' })
  const seeded = await (
    await fetch(`${url}/api/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ options: { num_predict: 3 }, tokentap_sim: { ttft_ms: 1, chunks: [] } }),
    })
  ).text()
  const seededLines = seeded.trim().split('\n')
  t.equal((JSON.parse(seededLines[seededLines.length - 1]) as OllamaLine).eval_count, 1, 'a body plan wins')
})

t.test('the simulator streams TGI /generate_stream one token an event, with details on the last', async (t) => {
  const url = await startSim(t)
  const res = await post(`${url}/generate_stream`, { inputs: 'hi', parameters: { max_new_tokens: 50 } })
  t.equal(res.headers.get('content-type'), 'text/event-stream')
  const bytes = Buffer.from(await res.arrayBuffer())
  const events = bytes.toString().split('\n\n').filter(Boolean)
  t.equal(events.length, 6)
  t.ok(
    events.every((e) => e.startsWith('data:{')),
    'no space after data:, as TGI writes it',
  )
  const last = JSON.parse(events[5].slice(5)) as TgiAnswer
  t.same(last.details, { finish_reason: 'length', generated_tokens: 6, seed: null })
  t.equal(last.generated_text.split(' ').length - 1, 6)
  const r = feed(new TgiParser(parserContext()), [bytes])
  t.equal(r.events.length, 6)
  t.same(r.summary.usage, { output: 6 })
  const whole = (await (await post(`${url}/generate`, { inputs: 'hi' })).json()) as TgiAnswer
  t.same(whole.details, { finish_reason: 'length', generated_tokens: 6, seed: null })
  const errored = await (await post(`${url}/generate_stream`, {}, { 'x-tokentap-sim': JSON.stringify({ ...plan, error_after: 1 }) })).text()
  t.equal(feed(new TgiParser(parserContext()), [Buffer.from(errored)]).summary.error, 'generation')
  const failed = await post(`${url}/generate`, {}, { 'x-tokentap-sim': JSON.stringify({ status: 422 }) })
  t.equal(failed.status, 422)
  const sized = await (
    await fetch(`${url}/generate_stream`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ inputs: 'x', parameters: { max_new_tokens: 4 } }) })
  ).text()
  t.equal(sized.split('\n\n').filter(Boolean).length, 4, 'max_new_tokens sizes a seeded plan')
})
