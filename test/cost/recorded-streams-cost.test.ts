import t from 'tap'
import type { Test } from 'tap'
import { readdirSync } from 'node:fs'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { replay, startUpstream } from '../helpers/upstream.ts'
import type { TestUpstream } from '../helpers/upstream.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'
import { fixture, sseFromDataLines } from '../helpers/fixtures.ts'
import { repoPath } from '../helpers/paths.ts'

// Every shared recorded stream (test/fixtures, the copy of ../shared/fixtures), replayed through
// the proxy with a price table of the test's own: the cost recorded by kind equals the token
// counts the same scrape reports (llm_input_tokens_total, llm_cached_input_tokens_total,
// llm_output_tokens_total, llm_reasoning_tokens_total) times the table's prices, worked out here
// apart from src/cost. Each kind has its own price, so a token counted under the wrong kind, or
// twice (cached input inside the input count, reasoning inside the output), shows.

/** Per million tokens: distinct for each kind. */
const PRICES = { input: 1.1, output: 2.3, cache_read: 0.7, cache_write: 1.9, reasoning: 3.7 } as const
const MODEL = 'test-model'

interface Case {
  readonly file: string
  readonly bytes: Buffer
  readonly path: string
  readonly contentType: string
}

const SSE = 'text/event-stream'

/** How each provider's recordings are asked for (the model named `test-model` in body or path). */
function caseOf(file: string): Case | undefined {
  const [dir, name] = file.split('/')
  const bytes = name.endsWith('.data.jsonl') ? sseFromDataLines(file) : fixture(file)
  const sse = (path: string): Case => ({ file, bytes, path, contentType: SSE })
  switch (dir) {
    case 'anthropic':
      return sse('/v1/messages')
    case 'openai-responses':
      return sse('/v1/responses')
    case 'openai':
      return sse(name.startsWith('completions') ? '/v1/completions' : '/v1/chat/completions')
    case 'openai-compatible':
      return sse(name.includes('responses') ? '/v1/responses' : '/v1/chat/completions')
    case 'azure':
    case 'vllm':
      return sse('/v1/chat/completions')
    case 'tgi':
      return sse(name.startsWith('generate') ? '/generate_stream' : '/v1/chat/completions')
    case 'gemini':
      if (name.endsWith('.json')) return { file, bytes, path: `/v1beta/models/${MODEL}:streamGenerateContent`, contentType: 'application/json; charset=UTF-8' }
      if (name.startsWith('vertex')) return sse(`/v1/projects/p/locations/us-central1/publishers/google/models/${MODEL}:streamGenerateContent?alt=sse`)
      return sse(`/v1beta/models/${MODEL}:streamGenerateContent?alt=sse`)
    case 'bedrock':
      return { file, bytes, path: `/model/${MODEL}/converse-stream`, contentType: 'application/vnd.amazon.eventstream' }
    case 'ollama':
      // The .httprr.txt is a whole HTTP exchange, not a body: its body is api-chat-stream.ndjson.
      if (name.endsWith('.httprr.txt')) return undefined
      return { file, bytes, path: name.startsWith('api-chat') ? '/api/chat' : '/api/generate', contentType: 'application/x-ndjson' }
    default:
      return undefined
  }
}

/** Every recording of the shared set: the directories ../shared/fixtures has (test/fixtures adds its own). */
const SHARED_DIRS = ['anthropic', 'azure', 'bedrock', 'gemini', 'ollama', 'openai', 'openai-compatible', 'openai-responses', 'tgi', 'vllm']
const CASES = SHARED_DIRS.flatMap((dir) =>
  readdirSync(repoPath('test', 'fixtures', dir))
    .sort()
    .map((f) => caseOf(`${dir}/${f}`))
    .filter((c): c is Case => c !== undefined),
)

/** One proxy with a route per case (`/c<i>` → the upstream's `/c<i>`), so each case has its own `route` label. */
async function replayAll(t: Test, cases: readonly Case[], pricing: Record<string, unknown>, model: string): Promise<{ proxy: RunningProxy; upstream: TestUpstream }> {
  const upstream = await startUpstream(async (req, res) => {
    const c = cases[Number(/^\/c(\d+)\//.exec(req.url ?? '')?.[1])]
    res.writeHead(200, { 'content-type': c.contentType })
    // Uneven reads, as a network delivers them.
    const pieces: { afterMs: number; bytes: Buffer }[] = []
    for (let at = 0, i = 0; at < c.bytes.length; i++) {
      const size = 1 + ((i * 7919) % 900)
      pieces.push({ afterMs: 0, bytes: c.bytes.subarray(at, at + size) })
      at += size
    }
    await replay(res, pieces)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: cases.map((_, i) => ({ prefix: `/c${i}`, upstream: `${upstream.url}/c${i}` })), pricing })
  t.teardown(() => proxy.close())
  for (const [i, c] of cases.entries()) {
    const res = await fetch(`${proxy.url}/c${i}${c.path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, stream: true }) })
    await res.arrayBuffer()
  }
  await proxy.waitForRequests(cases.length)
  return { proxy, upstream }
}

/** The tokens by kind the scrape reports for a route: the parts the bill is made of. */
function tokensOf(m: readonly Sample[], route: string): { input: number; output: number; cache_read: number; cache_write: number; reasoning: number; outputSource: string | undefined } {
  const input = sumOf(m, 'llm_input_tokens_total', { route })
  const read = sumOf(m, 'llm_cached_input_tokens_total', { route, cache: 'read' })
  const write = sumOf(m, 'llm_cached_input_tokens_total', { route, cache: 'write' })
  const output = select(m, 'llm_output_tokens_total', { route })
  const reasoning = sumOf(m, 'llm_reasoning_tokens_total', { route })
  const out = output.reduce((n, s) => n + s.value, 0)
  // Reasoning is part of the output; a provider reporting more reasoning than output (OpenRouter's
  // recording: 11 of 10) is billed for its output count, all of it reasoning.
  const billedReasoning = Math.min(reasoning, out)
  return { input: input - read - write, output: out - billedReasoning, cache_read: read, cache_write: write, reasoning: billedReasoning, outputSource: output[0]?.labels.source }
}

const close = (t: Test, actual: number, expected: number, what: string): void => {
  t.ok(Math.abs(actual - expected) <= 1e-12 * Math.max(1, Math.abs(expected)), `${what}: ${actual} = ${expected}`)
}

t.test('on every shared recorded stream the cost by kind is the reported tokens of that kind times its price', async (t) => {
  t.ok(CASES.length >= 25, `${CASES.length} recorded streams`)
  const { proxy } = await replayAll(t, CASES, { snapshot: false, models: { [MODEL]: PRICES } }, MODEL)
  const m = await proxy.scrape()
  let priced = 0
  for (const [i, c] of CASES.entries()) {
    const route = `/c${i}`
    const tokens = tokensOf(m, route)
    let total = 0
    for (const kind of ['input', 'output', 'cache_read', 'cache_write', 'reasoning'] as const) {
      const series = select(m, 'llm_cost_total', { route, kind })
      const expected = (tokens[kind] * PRICES[kind]) / 1e6
      total += expected
      if (tokens[kind] === 0) {
        t.same(series, [], `${c.file}: no ${kind} tokens, no ${kind} cost series`)
        continue
      }
      t.equal(series.length, 1, `${c.file}: one ${kind} series`)
      close(t, series[0]?.value ?? NaN, expected, `${c.file} ${kind} (${tokens[kind]} tokens)`)
      t.equal(series[0]?.labels.currency, 'USD', 'in the default currency')
      t.equal(series[0]?.labels.source, kind === 'output' ? tokens.outputSource : 'usage', `${c.file}: ${kind} cost carries its count's source`)
    }
    if (total > 0) {
      priced++
      close(t, sumOf(m, 'llm_request_cost_sum', { route }), total, `${c.file}: the request's cost is the sum of its kinds`)
      t.equal(sumOf(m, 'llm_request_cost_count', { route }), 1, `${c.file}: one request observed`)
    }
    t.same(select(m, 'llm_unpriced_tokens_total', { route }), [], `${c.file}: every token priced`)
  }
  t.ok(priced >= 20, `${priced} streams with a cost`)
  // The recordings with cached and reasoning counts make those kinds show up at all.
  t.ok(select(m, 'llm_cost_total', { kind: 'reasoning' }).length >= 4, 'reasoning is priced on its own')
})

t.test('a recorded stream of a model with no price counts its tokens as unpriced by kind, and costs nothing', async (t) => {
  const cases = CASES.filter((c) => ['anthropic/messages-thinking-signature-text.sse', 'openai-responses/responses-reasoning-summary-then-text.sse'].includes(c.file))
  t.equal(cases.length, 2)
  const { proxy } = await replayAll(t, cases, { snapshot: false, models: { [MODEL]: PRICES } }, 'no-such-model')
  const m = await proxy.scrape()
  t.same(select(m, 'llm_cost_total'), [], 'no cost series')
  t.same(select(m, 'llm_request_cost_count'), [], 'no request cost observed')
  // Anthropic: 43 input, 282 output; OpenAI Responses: 13 input, 1680 output of which 1408 reasoning.
  const unpriced = (route: string, kind: string): number => sumOf(m, 'llm_unpriced_tokens_total', { route, kind, model: 'no-such-model' })
  t.same([unpriced('/c0', 'input'), unpriced('/c0', 'output')], [43, 282], 'Anthropic: input and output unpriced')
  t.same([unpriced('/c1', 'input'), unpriced('/c1', 'output'), unpriced('/c1', 'reasoning')], [13, 1680 - 1408, 1408], 'OpenAI Responses: input, output and reasoning unpriced')
})

t.test('the shipped snapshot prices the recorded streams of the models it has, by their dated names', async (t) => {
  // Anthropic claude-sonnet-4-20250514: $3 in, $15 out per million (LiteLLM's entry, config/prices.json).
  const anthropic = CASES.find((c) => c.file === 'anthropic/messages-thinking-signature-text.sse') as Case
  // OpenAI gpt-4o-mini-2024-07-18 (the response's model; the request names the alias): $0.15 in, $0.60 out.
  const openai = CASES.find((c) => c.file === 'openai/chat-tool-call-deltas-usage-chunk.sse') as Case
  const upstream = await startUpstream(async (req, res) => {
    const c = req.url?.startsWith('/a/') ? anthropic : openai
    res.writeHead(200, { 'content-type': c.contentType })
    res.end(c.bytes)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({
    routes: [
      { prefix: '/a', upstream: `${upstream.url}/a` },
      { prefix: '/o', upstream: `${upstream.url}/o` },
    ],
    pricing: {},
  })
  t.teardown(() => proxy.close())
  for (const [prefix, c, model] of [
    ['/a', anthropic, 'claude-sonnet-4-20250514'],
    ['/o', openai, 'gpt-4o-mini-2024-07-18'],
  ] as const) {
    await (await fetch(`${proxy.url}${prefix}${c.path}`, { method: 'POST', body: JSON.stringify({ model, stream: true }) })).arrayBuffer()
  }
  const lines = await proxy.waitForRequests(2)
  const m = await proxy.scrape()
  close(t, sumOf(m, 'llm_cost_total', { route: '/a', kind: 'input' }), (43 * 3) / 1e6, 'Anthropic input: 43 × $3/M')
  close(t, sumOf(m, 'llm_cost_total', { route: '/a', kind: 'output' }), (282 * 15) / 1e6, 'Anthropic output: 282 × $15/M')
  close(t, sumOf(m, 'llm_cost_total', { route: '/o', kind: 'input' }), (53 * 0.15) / 1e6, 'OpenAI input: 53 × $0.15/M')
  close(t, sumOf(m, 'llm_cost_total', { route: '/o', kind: 'output' }), (15 * 0.6) / 1e6, 'OpenAI output: 15 × $0.60/M')
  const line = lines.find((l) => l.route === '/a') as Record<string, unknown>
  t.match(line, { cost: { currency: 'USD', priced_as: 'claude-sonnet-4-20250514', estimated: false } }, 'the log line names the price it used')
  close(t, (line.cost as { total: number }).total, (43 * 3 + 282 * 15) / 1e6, 'and the request total')
})

t.test('a stream cut before its usage is priced from the estimated output, marked estimate', async (t) => {
  const c = CASES.find((x) => x.file === 'openai/chat-text-role-first-usage-chunk.sse') as Case
  // Up to the last content event, without the usage chunk (prompt 78, completion 9 when whole).
  const text = c.bytes.toString('utf8')
  const cut = Buffer.from(text.slice(0, text.indexOf('"usage":{') === -1 ? text.length : text.lastIndexOf('data:', text.indexOf('"usage":{'))))
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': SSE })
    res.end(cut)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/p', upstream: upstream.url }], pricing: { snapshot: false, models: { [MODEL]: PRICES } } })
  t.teardown(() => proxy.close())
  await (await fetch(`${proxy.url}/p${c.path}`, { method: 'POST', body: JSON.stringify({ model: MODEL, stream: true }) })).arrayBuffer()
  const [line] = await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const output = select(m, 'llm_output_tokens_total', { route: '/p' })
  t.equal(output.length, 1)
  t.equal(output[0]?.labels.source, 'estimate', 'the output count is the tokenizer’s')
  const n = output[0]?.value ?? 0
  t.ok(n > 0, `${n} streamed tokens`)
  const cost = select(m, 'llm_cost_total', { route: '/p' })
  t.same(
    cost.map((s) => [s.labels.kind, s.labels.source]),
    [['output', 'estimate']],
    'only the output is priced (no input count was reported), marked estimate',
  )
  close(t, cost[0]?.value ?? NaN, (n * PRICES.output) / 1e6, 'the estimated tokens times the output price')
  t.match(line, { cost: { estimated: true } }, 'the log line says the cost is estimated')
})
