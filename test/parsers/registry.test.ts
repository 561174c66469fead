import t from 'tap'
import { genAiOperation, genAiProviderName, PROVIDERS, selectParser } from '../../src/parsers/registry.ts'
import type { ParserContext } from '../../src/parsers/types.ts'

const ctx = (path: string, contentType: string): ParserContext => ({ path, contentType, maxEventBytes: 1 << 20, countTokens: (s) => s.length })
const headers =
  (h: Record<string, string>) =>
  (name: string): string | undefined =>
    h[name]

t.test("a provider's header timings come with its parser, and only that provider's", async (t) => {
  const times = headers({ 'x-queue-time': '12', 'x-total-time': '340' })
  t.same(selectParser('auto', '/generate', 'application/json', ctx('/generate', 'application/json'), times).reported, { queue: 0.012, total: 0.34 })
  t.same(selectParser('tgi', '/generate', 'text/plain', ctx('/generate', 'text/plain'), times).reported, { queue: 0.012, total: 0.34 }, 'read from the head even when no parser reads the body')
  t.equal(selectParser('auto', '/v1/chat/completions', 'application/json', ctx('/v1/chat/completions', 'application/json'), times).reported, undefined, 'OpenAI sends no such headers')
  t.equal(selectParser('auto', '/generate', 'application/json', ctx('/generate', 'application/json')).reported, undefined, 'no header getter, no header timings')
})

t.test("gen_ai.provider.name is the registry's: the semantic conventions' name where it differs, else tokentap's", async (t) => {
  t.same(
    PROVIDERS.map((p) => [p.name, genAiProviderName(p.name)]),
    [
      ['gemini', 'gcp.gemini'],
      ['anthropic', 'anthropic'],
      ['cohere', 'cohere'],
      ['openai', 'openai'],
      ['ollama', 'ollama'],
      ['tgi', 'tgi'],
      ['bedrock', 'aws.bedrock'],
    ],
  )
  t.equal(genAiProviderName('unknown'), 'unknown')
})

t.test('gen_ai.operation.name follows the API path of a POST, whichever provider serves it', async (t) => {
  t.same(
    [
      '/v1/embeddings',
      '/v1beta/models/gemini-2.0-flash:streamGenerateContent',
      '/v1/chat/completions',
      '/v1/messages',
      '/v1/responses',
      '/model/m/converse-stream',
      '/model/m/invoke',
      '/v1/completions',
      '/generate_stream',
      '/v1/models',
    ].map((p) => genAiOperation('POST', p)),
    ['embeddings', 'generate_content', 'chat', 'chat', 'chat', 'chat', 'chat', 'text_completion', 'text_completion', undefined],
  )
  t.equal(genAiOperation('GET', '/v1/chat/completions'), undefined, 'no operation but a POST')
})
