import t from 'tap'
import { sumOf } from '../helpers/prometheus.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { chatBody, chatEvent } from '../helpers/faults.ts'

/**
 * `metrics.input_length_band_label`: TTFT and E2E carry `input_length_band`, from the input count
 * the provider reported (OpenAI's `usage.prompt_tokens`), `unknown` when it reported none.
 */

/** An OpenAI stream whose usage reports `x-prompt-tokens` input tokens (no usage chunk without it). */
async function upstreamReporting() {
  return startUpstream((req, res) => {
    const prompt = req.headers['x-prompt-tokens']
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    const usage =
      prompt === undefined
        ? ''
        : `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [], usage: { prompt_tokens: Number(prompt), completion_tokens: 1, total_tokens: Number(prompt) + 1 } })}\n\n`
    res.end(`${chatEvent('hi')}${usage}data: [DONE]\n\n`)
  })
}

async function send(url: string, prompts: readonly (number | undefined)[]): Promise<void> {
  for (const p of prompts) {
    const res = await fetch(`${url}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(p === undefined ? {} : { 'x-prompt-tokens': String(p) }) },
      body: chatBody(),
    })
    await res.text()
  }
}

// Each band's edges: 1,023 and 1,024, 8,191 and 8,192, 32,767 and 32,768, 131,071 and 131,072; 0 is a count too.
const PROMPTS = [0, 1023, 1024, 8191, 8192, 32_767, 32_768, 131_071, 131_072, 1_000_000, undefined, undefined]
const EXPECTED = { lt_1k: 2, lt_8k: 2, lt_32k: 2, lt_128k: 2, ge_128k: 2, unknown: 2 }

t.test('with the label on, TTFT and E2E are counted by the band of the reported input count, unknown when none was reported', async (t) => {
  const upstream = await upstreamReporting()
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/openai', upstream: upstream.url, provider: 'openai' }], metrics: { input_length_band_label: true } })
  t.teardown(() => proxy.close())
  await send(proxy.url, PROMPTS)
  await proxy.waitForRequests(PROMPTS.length)
  const samples = await proxy.scrape()
  for (const name of ['llm_time_to_first_token_seconds_count', 'llm_request_duration_seconds_count']) {
    const byBand = Object.fromEntries(Object.keys(EXPECTED).map((band) => [band, sumOf(samples, name, { input_length_band: band })]))
    t.same(byBand, EXPECTED, `${name} by input_length_band`)
    t.equal(sumOf(samples, name), PROMPTS.length, `${name}: every series carries the label`)
  }
  t.equal(sumOf(samples, 'llm_request_duration_seconds_count', { input_length_band: 'ge_128k', outcome: 'ok' }), 2, 'E2E keeps its outcome label beside the band')
  t.notOk(
    samples.some((s) => s.name.startsWith('llm_inter_token_latency_seconds') && 'input_length_band' in s.labels),
    'only TTFT and E2E carry it',
  )
})

t.test('with the label off (the default), no series carries input_length_band', async (t) => {
  const upstream = await upstreamReporting()
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/openai', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  await send(proxy.url, [5, undefined])
  await proxy.waitForRequests(2)
  const samples = await proxy.scrape()
  t.equal(sumOf(samples, 'llm_time_to_first_token_seconds_count'), 2)
  t.notOk(
    samples.some((s) => 'input_length_band' in s.labels),
    'no input_length_band label anywhere',
  )
})
