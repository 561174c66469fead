import t from 'tap'
import type { Test } from 'tap'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { validateConfig } from '../../src/config/load-config.ts'
import { parseCli } from '../../src/cli.ts'
import { CostKind, costFields, requestCost } from '../../src/cost/cost.ts'
import type { KindCost } from '../../src/cost/cost.ts'
import { nameCandidates } from '../../src/cost/model-names.ts'
import { parseLitellm, PriceTable, pricesOf, readLitellmFile, SNAPSHOT_FILE } from '../../src/cost/price-table.ts'
import { ChunkLog } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import type { Measurement } from '../../src/timing/measurement.ts'
import type { Usage } from '../../src/parsers/types.ts'
import type { TokentapError } from '../../src/errors.ts'

const M = 1e6
const ROUTE = { prefix: '/p', upstream: 'http://127.0.0.1:1' }

/** A finished ok request with this usage reported (no streamed chunks). */
function reported(usage: Usage): Measurement {
  return measure({ tReq: 0, tEnd: 1000, tHeaders: 10, statusCode: 200, failure: undefined, clientGone: false, chunks: new ChunkLog(), summary: { usage }, stallSeconds: 1 })
}

function tmp(t: Test, name: string, text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-prices-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = join(dir, name)
  writeFileSync(file, text)
  return file
}

const byKind = (kinds: readonly KindCost[]): Record<string, [number, number, number]> => Object.fromEntries(kinds.map((k) => [k.kind, [k.tokens, k.cost, k.unpriced]]))
const near = (a: number, b: number): boolean => Math.abs(a - b) <= 1e-15 + 1e-12 * Math.abs(b)

t.test('a model name generalises to its alias, snapshot date, Bedrock, Vertex and fine-tune forms, most specific first', async (t) => {
  t.same(nameCandidates('gpt-4o-2024-08-06'), ['gpt-4o-2024-08-06', 'gpt-4o'])
  t.same(nameCandidates('claude-3-5-sonnet-latest'), ['claude-3-5-sonnet-latest', 'claude-3-5-sonnet'])
  t.same(nameCandidates('GPT-4-0613'), ['gpt-4-0613', 'gpt-4'], 'lower-cased')
  t.same(nameCandidates('claude-sonnet-4@20250514'), ['claude-sonnet-4@20250514', 'claude-sonnet-4-20250514', 'claude-sonnet-4'])
  const bedrock = nameCandidates('us.anthropic.claude-sonnet-4-5-20250929-v1:0')
  t.same(bedrock.slice(0, 3), ['us.anthropic.claude-sonnet-4-5-20250929-v1:0', 'anthropic.claude-sonnet-4-5-20250929-v1:0', 'us.anthropic.claude-sonnet-4-5-20250929-v1'])
  t.ok(bedrock.includes('claude-sonnet-4-5-20250929'), 'the Anthropic name inside the Bedrock id')
  t.ok(bedrock.indexOf('claude-sonnet-4-5-20250929') < bedrock.indexOf('claude-sonnet-4-5'), 'the dated name before the undated one')
  t.ok(nameCandidates('arn:aws:bedrock:us-east-1:1:inference-profile/us.amazon.nova-lite-v1:0').includes('amazon.nova-lite-v1:0'), 'an inference profile ARN')
  t.same(nameCandidates('ft:gpt-4o-mini-2024-07-18:acme::B1x'), ['ft:gpt-4o-mini-2024-07-18:acme::b1x', 'ft:gpt-4o-mini-2024-07-18', 'gpt-4o-mini-2024-07-18', 'ft:gpt-4o-mini', 'gpt-4o-mini'])
  t.same(nameCandidates('gpt-3.5-turbo-instruct:20230824-v2'), ['gpt-3.5-turbo-instruct:20230824-v2', 'gpt-3.5-turbo-instruct'])
  t.same(nameCandidates('models/gemini-2.5-pro'), ['models/gemini-2.5-pro', 'gemini-2.5-pro'])
})

t.test('LiteLLM entries give per-token prices by kind, the 1-hour write and the long-context tiers; others are skipped', async (t) => {
  const table = parseLitellm('test', {
    sample_spec: { input_cost_per_token: 0, litellm_provider: 'one of …' },
    _snapshot: { source: 'x' },
    'claude-sonnet-4-5': {
      input_cost_per_token: 3e-6,
      output_cost_per_token: 1.5e-5,
      cache_read_input_token_cost: 3e-7,
      cache_creation_input_token_cost: 3.75e-6,
      cache_creation_input_token_cost_above_1hr: 6e-6,
      input_cost_per_token_above_200k_tokens: 6e-6,
      output_cost_per_token_above_200k_tokens: 2.25e-5,
      cache_creation_input_token_cost_above_1hr_above_200k_tokens: 1.2e-5,
      input_cost_per_token_batches: 1.5e-6,
      supports_vision: true,
      litellm_provider: 'anthropic',
    },
    'gemini/gemini-x': { input_cost_per_token: 1e-6, output_cost_per_token: 4e-6, output_cost_per_reasoning_token: 5e-6, input_cost_per_token_above_128k_tokens: 2e-6 },
    'dall-e-3': { output_cost_per_image: 0.04, mode: 'image_generation' },
  })
  t.same([...table.keys()], ['claude-sonnet-4-5', 'gemini/gemini-x'], 'the spec, metadata and the image model are no priced models')
  t.same(table.get('claude-sonnet-4-5'), {
    name: 'claude-sonnet-4-5',
    input: 3e-6,
    output: 1.5e-5,
    cacheRead: 3e-7,
    cacheWrite: 3.75e-6,
    cacheWrite1h: 6e-6,
    tiers: [{ aboveInputTokens: 200_000, input: 6e-6, output: 2.25e-5, cacheWrite1h: 1.2e-5 }],
  })
  t.same(table.get('gemini/gemini-x'), { name: 'gemini/gemini-x', input: 1e-6, output: 4e-6, reasoning: 5e-6, tiers: [{ aboveInputTokens: 128_000, input: 2e-6 }] })
})

t.test('a bad price file stops start-up with one line naming the file and the key', async (t) => {
  const cases: [string, string, RegExp][] = [
    [
      'negative.json',
      JSON.stringify({ 'gpt-x': { input_cost_per_token: -1, output_cost_per_token: 1e-6 } }),
      /'pricing\.file' .*negative\.json: 'gpt-x\.input_cost_per_token' must be a price per token/,
    ],
    [
      'string.json',
      JSON.stringify({ 'gpt-x': { input_cost_per_token: 1e-6, cache_read_input_token_cost_above_200k_tokens: '0.1' } }),
      /'gpt-x\.cache_read_input_token_cost_above_200k_tokens' must be a price per token/,
    ],
    ['entry.json', JSON.stringify({ 'gpt-x': 3 }), /'gpt-x' must be an object of prices/],
    ['array.json', '[1, 2]', /must be a JSON object of models/],
    ['broken.json', '{"gpt-x": {', /is not valid JSON/],
  ]
  for (const [name, text, message] of cases) {
    const file = tmp(t, name, text)
    const err = t.throws(() => validateConfig({ routes: [ROUTE], pricing: { file } })) as TokentapError
    t.equal(err.code, 'TOKENTAP_ERR_CONFIG_INVALID', name)
    t.match(err.message, message, name)
    t.notMatch(err.message, /\n/, `${name}: one line`)
  }
  t.throws(() => validateConfig({ routes: [ROUTE], pricing: { file: '/no/such/prices.json' } }), /'pricing\.file' \/no\/such\/prices\.json: cannot be read/)
  // The command line reports it as one line, exit code 1 (src/server.ts writes it to stderr).
  const cli = parseCli(
    ['--config', tmp(t, 'c.yaml', `routes: [{ prefix: /p, upstream: 'http://127.0.0.1:1' }]\npricing: { file: ${tmp(t, 'bad.json', '{"m": {"output_cost_per_token": null}}')} }\n`)],
    {},
  )
  t.equal(cli.kind, 'config-error')
  t.match(cli.kind === 'config-error' ? cli.message : '', /^invalid configuration: 'pricing\.file' \S+bad\.json: 'm\.output_cost_per_token' must be a price per token \(a number, 0 or more\)$/)
})

t.test('a bad price table in the config stops start-up with one line naming the key', async (t) => {
  t.throws(() => validateConfig({ routes: [ROUTE], pricing: { models: { 'gpt-x': { input: -1 } } } }), /'pricing\.models\.gpt-x\.input' must be >= 0/)
  t.throws(() => validateConfig({ routes: [ROUTE], pricing: { models: { 'gpt-x': { input: '1' } } } }), /'pricing\.models\.gpt-x\.input' must be number/)
  t.throws(() => validateConfig({ routes: [ROUTE], pricing: { models: { 'gpt-x': { inptu: 1 } } } }), /'pricing\.models\.gpt-x\.inptu' is not a known setting/)
  t.throws(() => validateConfig({ routes: [ROUTE], pricing: { models: { 'gpt-x': { cache_read: 1 } } } }), /'pricing\.models\.gpt-x' needs an 'input' or 'output' price/)
  t.throws(() => validateConfig({ routes: [ROUTE], pricing: { models: { 'gpt-x': { input: 1, tiers: [{ input: 2 }] } } } }), /'pricing\.models\.gpt-x\.tiers\[0\]\.above_input_tokens' is required/)
  t.throws(() => validateConfig({ routes: [ROUTE], pricing: { currency: 'usd' } }), /'pricing\.currency' has the wrong form/)
})

t.test('the shipped snapshot loads, states its source commit, and prices by dated, Bedrock and Vertex names', async (t) => {
  const doc = JSON.parse(readFileSync(SNAPSHOT_FILE, 'utf8')) as { _snapshot: { source: string; commit: string; taken: string } }
  t.match(doc._snapshot.source, /^https:\/\/github\.com\/BerriAI\/litellm\/blob\/[0-9a-f]{40}\/model_prices_and_context_window\.json$/)
  t.match(doc._snapshot.taken, /^\d{4}-\d{2}-\d{2}$/)
  const snapshot = readLitellmFile('pricing.snapshot', SNAPSHOT_FILE)
  t.ok(snapshot.size >= 20, `${snapshot.size} models`)
  const table = pricesOf(validateConfig({ routes: [ROUTE], pricing: {} }).pricing as never)
  t.equal(table.currency, 'USD')
  t.equal(table.priceOf('anthropic', 'claude-sonnet-4-5-20250929', undefined)?.name, 'claude-sonnet-4-5-20250929')
  t.equal(table.priceOf('bedrock', 'us.anthropic.claude-sonnet-4-5-20250929-v1:0', undefined)?.name, 'claude-sonnet-4-5-20250929', 'a Bedrock cross-region id')
  t.equal(table.priceOf('anthropic', 'claude-opus-4-5@20251101', undefined)?.name, 'claude-opus-4-5-20251101', 'a Vertex id')
  t.equal(table.priceOf('openai', 'gpt-5-2025-08-07', undefined)?.name, 'gpt-5', 'a dated OpenAI snapshot the table does not list: its alias')
  t.equal(table.priceOf('openai', 'no-such-model', undefined), undefined)
  t.equal(table.priceOf('openai', 'no-such-model', undefined), undefined, 'the same answer from the cache')
})

t.test('the shipped snapshot prices OpenAI, Gemini (with its long-context tier), Mistral and DeepSeek as LiteLLM does at its commit', async (t) => {
  // The figures of LiteLLM's model_prices_and_context_window.json at the commit config/prices.json names.
  const table = new PriceTable('USD', [readLitellmFile('pricing.snapshot', SNAPSHOT_FILE)])
  t.strictSame(table.priceOf('openai', 'gpt-4o-2024-08-06', undefined), { name: 'gpt-4o-2024-08-06', input: 2.5e-6, output: 1e-5, cacheRead: 1.25e-6, tiers: [] })
  t.strictSame(table.priceOf('openai', 'gpt-4o-2024-05-13', undefined), { name: 'gpt-4o-2024-05-13', input: 5e-6, output: 1.5e-5, tiers: [] }, 'a dated snapshot priced apart from its alias')
  t.equal(table.priceOf('openai', 'gpt-4o', undefined)?.input, 2.5e-6)
  t.strictSame(table.priceOf('openai', 'gpt-4.1-mini-2025-04-14', undefined), { name: 'gpt-4.1-mini-2025-04-14', input: 4e-7, output: 1.6e-6, cacheRead: 1e-7, tiers: [] })
  t.strictSame(table.priceOf('openai', 'o4-mini', undefined), { name: 'o4-mini', input: 1.1e-6, output: 4.4e-6, cacheRead: 2.75e-7, tiers: [] })
  t.equal(table.priceOf('openai', 'o3-2025-04-16', undefined)?.output, 8e-6)
  const geminiPro = {
    name: 'gemini-2.5-pro',
    input: 1.25e-6,
    output: 1e-5,
    cacheRead: 1.25e-7,
    tiers: [{ aboveInputTokens: 200_000, input: 2.5e-6, output: 1.5e-5, cacheRead: 2.5e-7, cacheWrite: 2.5e-7 }],
  }
  t.strictSame(table.priceOf('gemini', 'gemini-2.5-pro', undefined), geminiPro, 'the Gemini API, with prompts over 200k tokens priced higher')
  t.strictSame(table.priceOf('gemini', 'publishers/google/models/gemini-2.5-pro', undefined), geminiPro, 'a Vertex model path')
  t.strictSame(table.priceOf('gemini', 'gemini-2.5-flash', undefined), { name: 'gemini-2.5-flash', input: 3e-7, output: 2.5e-6, reasoning: 2.5e-6, cacheRead: 3e-8, tiers: [] })
  t.equal(table.priceOf('gemini', 'gemini-2.0-flash', undefined)?.input, 1e-7)
  t.strictSame(
    table.priceOf('openai', 'deepseek-chat', undefined),
    { name: 'deepseek-chat', input: 2.8e-7, output: 4.2e-7, cacheRead: 2.8e-8, cacheWrite: 0, tiers: [] },
    'DeepSeek on an OpenAI-compatible route',
  )
  t.strictSame(table.priceOf('openai', 'deepseek-reasoner', undefined), { name: 'deepseek-reasoner', input: 2.8e-7, output: 4.2e-7, cacheRead: 2.8e-8, tiers: [] })
  t.strictSame(table.priceOf('openai', 'mistral-large-latest', undefined), { name: 'mistral-large-latest', input: 5e-7, output: 1.5e-6, tiers: [] })
  t.strictSame(table.priceOf('openai', 'mistral-small-latest', undefined), { name: 'mistral-small-latest', input: 6e-8, output: 1.8e-7, tiers: [] })
})

t.test('every price in the shipped snapshot is a finite number, 0 or more, and every model has an input and an output price', async (t) => {
  const doc = JSON.parse(readFileSync(SNAPSHOT_FILE, 'utf8')) as Record<string, Record<string, unknown>>
  const models = Object.entries(doc).filter(([name]) => !name.startsWith('_'))
  t.ok(models.length >= 50, `${models.length} models`)
  for (const [name, entry] of models) {
    for (const [key, value] of Object.entries(entry)) {
      if (key === 'litellm_provider' || key === 'mode') continue
      t.ok(typeof value === 'number' && Number.isFinite(value) && value >= 0, `${name}.${key} = ${String(value)}`)
    }
    t.ok(typeof entry.input_cost_per_token === 'number' && typeof entry.output_cost_per_token === 'number', `${name} prices input and output`)
  }
  const prices = readLitellmFile('pricing.snapshot', SNAPSHOT_FILE)
  t.equal(prices.size, models.length, 'the loader keeps every entry')
  for (const price of prices.values()) {
    for (const kinds of [price, ...price.tiers]) {
      for (const kind of ['input', 'output', 'cacheRead', 'cacheWrite', 'cacheWrite1h', 'reasoning'] as const) {
        const value = kinds[kind]
        if (value !== undefined) t.ok(Number.isFinite(value) && value >= 0, `${price.name} ${kind}`)
      }
    }
  }
})

t.test('sources in order: the config wins over the file, the file over the snapshot; provider/model before model; aliases', async (t) => {
  const file = tmp(t, 'p.json', JSON.stringify({ 'gpt-5': { input_cost_per_token: 9e-6, output_cost_per_token: 9e-6 }, 'gpt-4o-mini': { input_cost_per_token: 8e-6, output_cost_per_token: 8e-6 } }))
  const config = validateConfig({
    routes: [ROUTE],
    pricing: { file, models: { 'gpt-4o-mini': { input: 1, output: 2 }, 'azure/gpt-4o-mini': { input: 3, output: 4 } }, aliases: { 'my-deployment': 'gpt-5' } },
  })
  const table = pricesOf(config.pricing as never)
  t.same([table.priceOf('openai', 'gpt-4o-mini-2024-07-18', undefined)?.input], [1 / M], 'the config table, through the snapshot date')
  t.same([table.priceOf('azure', 'gpt-4o-mini', undefined)?.input], [3 / M], 'provider/model first')
  t.same([table.priceOf('openai', 'gpt-5', undefined)?.input], [9e-6], 'the file over the snapshot')
  t.same([table.priceOf('azure', 'my-deployment', undefined)?.name], ['gpt-5'], 'an Azure deployment through its alias')
  t.same([table.priceOf('azure', 'other-deployment', 'gpt-4o-mini-2024-07-18')?.input], [3 / M], 'else the model the response names')
  t.equal(new PriceTable('EUR', []).priceOf('openai', undefined, undefined), undefined, 'no name, no price')
})

t.test('the config table is per million tokens, every kind and its long-context tiers', async (t) => {
  const config = validateConfig({
    routes: [ROUTE],
    pricing: {
      snapshot: false,
      models: {
        'claude-x': {
          input: 3,
          output: 15,
          cache_read: 0.3,
          cache_write: 3.75,
          cache_write_1h: 6,
          reasoning: 15,
          tiers: [{ above_input_tokens: 200_000, input: 6, output: 22.5, cache_read: 0.6, cache_write: 7.5, cache_write_1h: 12, reasoning: 22.5 }],
        },
      },
    },
  })
  const price = pricesOf(config.pricing as never).priceOf('anthropic', 'claude-x', undefined)
  t.same(price, {
    name: 'claude-x',
    input: 3 / M,
    output: 15 / M,
    cacheRead: 0.3 / M,
    cacheWrite: 3.75 / M,
    cacheWrite1h: 6 / M,
    reasoning: 15 / M,
    tiers: [{ aboveInputTokens: 200_000, input: 6 / M, output: 22.5 / M, cacheRead: 0.6 / M, cacheWrite: 7.5 / M, cacheWrite1h: 12 / M, reasoning: 22.5 / M }],
  })
  const big = requestCost(pricesOf(config.pricing as never), 'anthropic', 'claude-x', undefined, reported({ input: 300_000, cacheRead: 100_000, output: 10 }))
  t.same(
    byKind(big?.kinds ?? []),
    { input: [200_000, 200_000 * (6 / M), 0], output: [10, 10 * (22.5 / M), 0], cache_read: [100_000, 100_000 * (0.6 / M), 0] },
    'a 300k-token prompt at the tier prices',
  )
})

t.test('cost by kind: cached input and reasoning counted once, fallbacks as providers bill, the rest unpriced', async (t) => {
  const table = new PriceTable('USD', [
    parseLitellm('test', {
      full: {
        input_cost_per_token: 2e-6,
        output_cost_per_token: 8e-6,
        cache_read_input_token_cost: 5e-7,
        cache_creation_input_token_cost: 2.5e-6,
        cache_creation_input_token_cost_above_1hr: 4e-6,
        output_cost_per_reasoning_token: 1e-5,
      },
      plain: { input_cost_per_token: 2e-6, output_cost_per_token: 8e-6 },
      embed: { input_cost_per_token: 1e-7 },
      tiered: { input_cost_per_token: 1e-6, output_cost_per_token: 2e-6, input_cost_per_token_above_200k_tokens: 3e-6 },
    }),
  ])
  // OpenAI-style: 2006 input of which 1920 cached, 300 output of which 256 reasoning.
  const openai = reported({ input: 2006, cacheRead: 1920, output: 300, reasoning: 256 })
  const full = requestCost(table, 'openai', 'full', undefined, openai)
  t.same(byKind(full?.kinds ?? []), { input: [86, 86 * 2e-6, 0], output: [44, 44 * 8e-6, 0], cache_read: [1920, 1920 * 5e-7, 0], reasoning: [256, 256 * 1e-5, 0] })
  t.ok(near(full?.total ?? 0, 86 * 2e-6 + 44 * 8e-6 + 1920 * 5e-7 + 256 * 1e-5), 'the total is the sum of the kinds')
  const plain = requestCost(table, 'openai', 'plain', undefined, openai)
  t.same(
    byKind(plain?.kinds ?? []),
    { input: [86, 86 * 2e-6, 0], output: [44, 44 * 8e-6, 0], cache_read: [1920, 1920 * 2e-6, 0], reasoning: [256, 256 * 8e-6, 0] },
    'no cache or reasoning price: billed as input and output',
  )
  // Anthropic-style: 21 uncached + 1000 read + 500 written, 300 of them for an hour.
  const anthropic = reported({ input: 1521, cacheRead: 1000, cacheWrite: 500, cacheWrite1h: 300, output: 10 })
  t.same(byKind(requestCost(table, 'anthropic', 'full', undefined, anthropic)?.kinds ?? []).cache_write, [500, 200 * 2.5e-6 + 300 * 4e-6, 0], '5-minute and 1-hour writes at their prices')
  const noWritePrice = requestCost(table, 'anthropic', 'plain', undefined, anthropic)
  t.same(byKind(noWritePrice?.kinds ?? []).cache_write, [500, 0, 500], 'a write with no write price is unpriced, not guessed')
  t.equal(noWritePrice?.unpriced, 500)
  const embedding = requestCost(table, 'openai', 'embed', undefined, reported({ input: 100, output: 0 }))
  t.same(byKind(embedding?.kinds ?? []), { input: [100, 100 * 1e-7, 0] }, 'no output tokens, no output kind')
  t.same(byKind(requestCost(table, 'openai', 'embed', undefined, reported({ input: 1, output: 5 }))?.kinds ?? []).output, [5, 0, 5], 'output of a model with no output price is unpriced')
  t.same(
    byKind(requestCost(table, 'openai', 'tiered', undefined, reported({ input: 200_001, output: 10 }))?.kinds ?? []),
    { input: [200_001, 200_001 * 3e-6, 0], output: [10, 10 * 2e-6, 0] },
    'above 200k input tokens: the tier price, the rest as base',
  )
  t.same(byKind(requestCost(table, 'openai', 'tiered', undefined, reported({ input: 200_000, output: 10 }))?.kinds ?? []).input, [200_000, 200_000 * 1e-6, 0], 'at the threshold: the base price')
  t.equal(
    requestCost(
      table,
      'openai',
      'full',
      undefined,
      measure({ tReq: 0, tEnd: 1, tHeaders: undefined, statusCode: 502, failure: undefined, clientGone: false, chunks: new ChunkLog(), summary: {}, stallSeconds: 1 }),
    ),
    undefined,
    'no tokens, no cost',
  )
  const unknown = requestCost(table, 'openai', 'nope', undefined, openai)
  t.same([unknown?.total, unknown?.unpriced, unknown?.pricedAs], [0, 2006 + 300, undefined], 'a model with no price: every token unpriced')
  t.same(costFields(full as never), {
    currency: 'USD',
    total: full?.total,
    by_kind: { input: 86 * 2e-6, output: 44 * 8e-6, cache_read: 1920 * 5e-7, reasoning: 256 * 1e-5 },
    priced_as: 'full',
    unpriced_tokens: 0,
    estimated: false,
  })
  t.same(Object.values(CostKind), ['input', 'output', 'cache_read', 'cache_write', 'reasoning'])
})

t.test('budgets: one of tenant or route, an amount, pricing, and the tenant label or a known route', async (t) => {
  const base = { routes: [ROUTE, { prefix: '/q', name: 'queue', upstream: 'http://127.0.0.1:1' }], pricing: {} }
  t.throws(() => validateConfig({ ...base, budgets: [{ tenant: 'a', route: '/p', daily: 1 }] }), /'budgets\[0\]' needs exactly one of 'tenant' or 'route'/)
  t.throws(() => validateConfig({ ...base, budgets: [{ route: '/p', month: 1 }] }), /'budgets\[0\]\.month' is not a known setting/)
  t.throws(() => validateConfig({ ...base, budgets: [{ route: '/p' }] }), /'budgets\[0\]' needs 'daily' or 'monthly'/)
  t.throws(() => validateConfig({ ...base, budgets: [{ route: '/p', daily: 0 }] }), /'budgets\[0\]\.daily' must be > 0/)
  t.throws(() => validateConfig({ routes: [ROUTE], budgets: [{ route: '/p', daily: 1 }] }), /'budgets\[0\]' needs 'pricing:'/)
  t.throws(() => validateConfig({ ...base, budgets: [{ tenant: 'a', daily: 1 }] }), /'budgets\[0\]\.tenant' needs 'metrics\.tenant'/)
  t.throws(() => validateConfig({ ...base, budgets: [{ route: '/nope', daily: 1 }] }), /'budgets\[0\]\.route' \/nope is no route's prefix or name/)
  t.doesNotThrow(
    () =>
      validateConfig({
        ...base,
        budgets: [
          { route: 'queue', daily: 1 },
          { route: '/p', monthly: 5 },
        ],
      }),
    'a route by name or prefix',
  )
})
