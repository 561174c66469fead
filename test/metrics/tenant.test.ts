import { createHmac } from 'node:crypto'
import t from 'tap'
import { TenantResolver, apiKeyOf } from '../../src/record/tenant.ts'
import { validateConfig } from '../../src/config/load-config.ts'

// The tenant label's value for a sequence of requests: the cap, `none`, `other`, the length cut,
// and the keyed hash of an API key (never the key).

const SECRET = 'a-secret-of-32-characters-or-so!'
const hash = (key: string): string => createHmac('sha256', SECRET).update(key).digest('hex').slice(0, 12)

t.test('a header tenant: the first max_values distinct values are kept, later ones are other; none and other do not count', async (t) => {
  const r = new TenantResolver({ header: 'X-Team', max_values: 2 })
  const seq = [
    { 'x-team': 'search' },
    {},
    { 'x-team': '' },
    { 'x-team': 'ads' },
    { 'x-team': 'none' },
    { 'x-team': 'other' },
    { 'x-team': 'search' },
    { 'x-team': 'billing' },
    { 'x-team': 'ads' },
    { 'x-team': 'maps' },
  ]
  t.same(
    seq.map((h) => r.resolve(h, '/v1/chat/completions')),
    ['search', 'none', 'none', 'ads', 'none', 'other', 'search', 'other', 'ads', 'other'],
  )
})

t.test('a header value longer than the label length limit is cut to 128 characters, and the cut value counts once', async (t) => {
  const r = new TenantResolver({ header: 'x-team', max_values: 2 })
  const long = 'x'.repeat(300)
  t.equal(r.resolve({ 'x-team': long }, '/'), 'x'.repeat(128))
  t.equal(r.resolve({ 'x-team': `${long}y` }, '/'), 'x'.repeat(128), 'another value with the same first 128 characters is the same tenant')
  t.equal(r.resolve({ 'x-team': 'b' }, '/'), 'b', 'the cut value took one place of two')
  t.equal(r.resolve({ 'x-team': 'c' }, '/'), 'other')
})

t.test('from: api_key: the label is the first 12 hex digits of HMAC-SHA256(secret, key), capped like any value', async (t) => {
  const r = new TenantResolver({ from: 'api_key', secret: SECRET, max_values: 2 })
  const a = r.resolve({ authorization: 'Bearer sk-proj-AAAA' }, '/v1/chat/completions')
  t.equal(a, hash('sk-proj-AAAA'))
  t.match(a, /^[0-9a-f]{12}$/)
  t.equal(r.resolve({ 'x-api-key': 'sk-ant-BBBB' }, '/v1/messages'), hash('sk-ant-BBBB'))
  t.equal(r.resolve({ authorization: 'Bearer sk-proj-AAAA' }, '/v1/responses'), a, 'the same key is the same tenant on any path')
  t.equal(r.resolve({ authorization: 'Bearer sk-proj-CCCC' }, '/'), 'other', 'a third key past max_values 2')
  t.equal(r.resolve({}, '/'), 'none', 'no key at all')
  t.equal(r.resolve({ 'x-team': 'search' }, '/'), 'none', 'the header setting is not read with from: api_key')
  t.not(new TenantResolver({ from: 'api_key', secret: `${SECRET}-other`, max_values: 2 }).resolve({ authorization: 'Bearer sk-proj-AAAA' }, '/'), a, 'another secret gives other labels')
})

t.test('the API key is found where each provider sends it', async (t) => {
  t.equal(apiKeyOf({ authorization: 'Bearer sk-1' }, '/'), 'sk-1', 'OpenAI and compatible servers: Authorization: Bearer')
  t.equal(apiKeyOf({ 'x-api-key': 'sk-ant-2' }, '/'), 'sk-ant-2', 'Anthropic: x-api-key')
  t.equal(apiKeyOf({ 'api-key': 'az-3' }, '/'), 'az-3', 'Azure OpenAI: api-key')
  t.equal(apiKeyOf({ 'x-goog-api-key': 'AIza-4' }, '/'), 'AIza-4', 'Gemini: x-goog-api-key')
  t.equal(apiKeyOf({}, '/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=AIza-5'), 'AIza-5', 'Gemini: the key query parameter')
  t.equal(
    apiKeyOf({ authorization: 'AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc123' }, '/model/m/converse-stream'),
    'AKIAEXAMPLE',
    'Bedrock SigV4: the access key id (the signature changes every request)',
  )
  t.equal(apiKeyOf({ 'sec-websocket-protocol': 'realtime, openai-insecure-api-key.sk-6, openai-beta.realtime-v1' }, '/v1/realtime'), 'sk-6', 'OpenAI Realtime from a browser: the subprotocol')
  t.equal(apiKeyOf({ authorization: 'Bearer sk-7', 'x-api-key': 'other' }, '/'), 'sk-7', 'Authorization first')
  t.equal(apiKeyOf({ authorization: '' }, '/?alt=sse'), undefined)
})

t.test('a scheme without credentials, an empty or blank key is no key, in every header and case', async (t) => {
  // Node trims header values: `Authorization: Bearer ` arrives as `Bearer`.
  for (const auth of ['Bearer', 'bearer', 'BEARER', 'Bearer   ', 'Basic', 'basic', 'Token', 'ApiKey', 'Key', 'AWS4-HMAC-SHA256', 'Digest', 'Negotiate']) {
    t.equal(apiKeyOf({ authorization: auth }, '/'), undefined, `Authorization: ${auth.trim()} alone`)
  }
  t.equal(apiKeyOf({ authorization: 'Basic Og==' }, '/'), undefined, 'Basic with an empty user and password (base64 of ":")')
  t.equal(apiKeyOf({ authorization: `Basic ${Buffer.from('me:pw').toString('base64')}` }, '/'), Buffer.from('me:pw').toString('base64'), 'Basic with credentials')
  t.equal(
    apiKeyOf({ authorization: 'AWS4-HMAC-SHA256 Credential=/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=abc' }, '/'),
    undefined,
    'SigV4 without an access key id (never the signed rest, which changes every request)',
  )
  t.equal(apiKeyOf({ authorization: 'aws4-hmac-sha256 Credential=AKIALOWER/20260101/x/y/aws4_request' }, '/'), 'AKIALOWER', 'SigV4 in lower case')
  t.equal(apiKeyOf({ 'x-api-key': '' }, '/'), undefined, 'x-api-key empty')
  t.equal(apiKeyOf({ 'api-key': ' ' }, '/'), undefined, 'api-key blank')
  t.equal(apiKeyOf({ 'x-goog-api-key': '' }, '/'), undefined, 'x-goog-api-key empty')
  t.equal(apiKeyOf({}, '/v1beta/models/m:generateContent?key='), undefined, 'an empty key query parameter')
  t.equal(apiKeyOf({}, '/v1beta/models/m:generateContent?key=%20'), undefined, 'a blank key query parameter')
  t.equal(apiKeyOf({ 'sec-websocket-protocol': 'realtime, openai-insecure-api-key.' }, '/v1/realtime'), undefined, 'an empty key subprotocol')
  t.equal(apiKeyOf({ authorization: 'Bearer', 'x-api-key': 'sk-ant-8' }, '/'), 'sk-ant-8', 'an empty Authorization falls through to the next header')
  t.equal(apiKeyOf({ authorization: 'sk-bare-9' }, '/'), 'sk-bare-9', 'a bare key without a scheme is a key')
  const r = new TenantResolver({ from: 'api_key', secret: SECRET, max_values: 1 })
  t.equal(r.resolve({ authorization: 'Bearer' }, '/'), 'none', 'an empty Bearer token is the none tenant')
  t.equal(r.resolve({ authorization: 'Bearer sk-1' }, '/'), hash('sk-1'), 'and did not take the one place under max_values')
})

t.test('metrics.tenant is validated: a header, or from: api_key with a secret of at least 16 characters', async (t) => {
  const routes = [{ prefix: '/p', upstream: 'http://127.0.0.1:1' }]
  t.same(validateConfig({ metrics: { tenant: { header: 'x-team' } }, routes }).metrics.tenant, { header: 'x-team', from: 'header', max_values: 1000 })
  t.throws(() => validateConfig({ metrics: { tenant: {} }, routes }), /'metrics\.tenant\.header' is needed/)
  t.throws(() => validateConfig({ metrics: { tenant: { from: 'api_key' } }, routes }), /'metrics\.tenant\.secret' is needed/)
  t.throws(() => validateConfig({ metrics: { tenant: { from: 'api_key', secret: 'short' } }, routes }), /metrics\.tenant\.secret/)
  t.throws(() => validateConfig({ metrics: { tenant: { header: 'x team' } }, routes }), /metrics\.tenant\.header/)
  t.throws(() => validateConfig({ metrics: { tenant: { header: 'x-team', max_values: 0 } }, routes }), /metrics\.tenant\.max_values/)
})
