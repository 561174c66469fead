import t from 'tap'
import type { Test } from 'tap'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DEFAULT_CONFIG_FILE, loadConfig, validateConfig } from '../../src/config/load-config.ts'
import { TokentapError } from '../../src/errors.ts'
import { DEFAULT_BUCKETS, PROVIDERS } from '../../src/config/schema.ts'
import { PROVIDERS as REGISTRY } from '../../src/parsers/registry.ts'

const dir = mkdtempSync(join(tmpdir(), 'tokentap-config-'))
function file(name: string, text: string): string {
  const p = join(dir, name)
  writeFileSync(p, text)
  return p
}

function failsWith(t: Test, fn: () => unknown, pattern: RegExp, msg: string): void {
  try {
    fn()
    t.fail(`${msg}: no error`)
  } catch (err) {
    t.ok(err instanceof TokentapError, `${msg}: a TokentapError`)
    t.match((err as Error).message, pattern, msg)
  }
}

t.test('the shipped default config loads: /sim plus the public providers, contract ports', async (t) => {
  const c = loadConfig(DEFAULT_CONFIG_FILE, {})
  t.equal(c.server.port, 8080)
  t.equal(c.admin.port, 9464)
  t.same(
    c.routes.map((r) => r.prefix),
    ['/openai', '/anthropic', '/gemini', '/ollama', '/sim'],
  )
  t.equal(c.routes.find((r) => r.prefix === '/ollama')?.upstream, 'http://127.0.0.1:11434')
  t.ok(c.routes.find((r) => r.prefix === '/sim')?.simulator, 'the simulator route has its defaults filled in')
  t.equal(c.limits.max_models_per_route, 100)
  t.equal(c.server.body_limit_bytes, 64 * 1024 * 1024)
  t.same(c.metrics.buckets.itl, DEFAULT_BUCKETS.itl)
  t.ok(Object.isFrozen(c) && Object.isFrozen(c.routes[0]), 'the config is frozen')
})

t.test('buckets are fine enough for P99 alerting: ITL 0.5 ms … 10 s dense in 5–100 ms, TTFT 5 ms … 120 s, E2E to 30 min', async (t) => {
  t.equal(DEFAULT_BUCKETS.itl[0], 0.0005)
  t.equal(DEFAULT_BUCKETS.itl.at(-1), 10)
  t.ok(DEFAULT_BUCKETS.itl.filter((b) => b >= 0.005 && b <= 0.1).length >= 20, 'at least 20 bounds between 5 and 100 ms')
  t.equal(DEFAULT_BUCKETS.ttft[0], 0.005)
  t.equal(DEFAULT_BUCKETS.ttft.at(-1), 120)
  t.equal(DEFAULT_BUCKETS.e2e.at(-1), 1800)
})

t.test('environment overrides: TOKENTAP_PORT, TOKENTAP_ADMIN_PORT, TOKENTAP_LOG_LEVEL', async (t) => {
  const c = loadConfig(DEFAULT_CONFIG_FILE, { TOKENTAP_PORT: '18080', TOKENTAP_ADMIN_PORT: '19464', TOKENTAP_LOG_LEVEL: 'warn' })
  t.equal(c.server.port, 18080)
  t.equal(c.admin.port, 19464)
  t.equal(c.log.level, 'warn')
  failsWith(t, () => loadConfig(DEFAULT_CONFIG_FILE, { TOKENTAP_PORT: 'eighty' }), /TOKENTAP_PORT='eighty'/, 'a bad port names the variable')
  failsWith(t, () => loadConfig(DEFAULT_CONFIG_FILE, { TOKENTAP_LOG_LEVEL: 'loud' }), /TOKENTAP_LOG_LEVEL='loud' is not valid: must be one of fatal, error/, 'a bad level names the variable')
})

t.test('both listeners bind loopback unless configured; TOKENTAP_HOST and TOKENTAP_ADMIN_HOST set them', async (t) => {
  const plain = loadConfig(DEFAULT_CONFIG_FILE, {})
  t.equal(plain.server.host, '127.0.0.1', 'the proxy listener')
  t.equal(plain.admin.host, '127.0.0.1', 'the admin listener (metrics and request records)')
  const c = loadConfig(DEFAULT_CONFIG_FILE, { TOKENTAP_HOST: '0.0.0.0', TOKENTAP_ADMIN_HOST: '::' })
  t.equal(c.server.host, '0.0.0.0')
  t.equal(c.admin.host, '::')
  failsWith(t, () => loadConfig(DEFAULT_CONFIG_FILE, { TOKENTAP_HOST: '0.0.0.0 x' }), /TOKENTAP_HOST='0.0.0.0 x'/, 'a bad host names the variable')
})

t.test('a bad file stops start-up with a message naming the key and the problem', async (t) => {
  failsWith(t, () => loadConfig(join(dir, 'missing.yaml'), {}), /cannot read config file/, 'missing file')
  failsWith(t, () => loadConfig(file('bad.yaml', 'routes: [\n  - prefix: /a\n  upstream'), {}), /not valid YAML/, 'broken YAML')
  failsWith(t, () => loadConfig(file('list.yaml', '- a\n- b\n'), {}), /must be a mapping/, 'not a mapping')
  const cases: [string, RegExp][] = [
    ['routes: []', /'routes' must NOT have fewer than 1 items/],
    ['{}', /'routes' is required/],
    ['routes: [{ prefix: /a, upstream: http://x }]\nserver: { port: 99999 }', /'server.port' must be <= 65535/],
    ['routes: [{ prefix: /a, upstream: http://x }]\nserver: { prot: 1 }', /'server.prot' is not a known setting/],
    ['routes: [{ prefix: a, upstream: http://x }]', /'routes\[0\].prefix' has the wrong form/],
    ['routes: [{ prefix: /a, upstream: ftp://x }]', /'routes\[0\].upstream' has the wrong form/],
    ['routes: [{ prefix: /a, upstream: http://x, provider: acme }]', /'routes\[0\].provider' must be one of auto, anthropic, bedrock, cohere, gemini, ollama, openai, tgi$/],
    ['routes: [{ prefix: /a }]', /'routes\[0\]' needs exactly one of 'upstream' or 'simulator'/],
    ['routes: [{ prefix: /a, upstream: http://x, simulator: {} }]', /exactly one of/],
    ['routes: [{ prefix: /a, upstream: http://x }, { prefix: /a/, upstream: http://y }]', /'routes\[1\].prefix' \/a is used by another route/],
    ['routes: [{ prefix: /a, simulator: { ttft_ms: -1 } }]', /'routes\[0\].simulator.ttft_ms' must be >= 0/],
    ['routes: [{ prefix: /a, upstream: http://x }]\ntokenizer: { models: [{ pattern: "([", encoding: o200k_base }] }', /'tokenizer.models\[0\].pattern'/],
    ['routes: [{ prefix: /a, upstream: http://x }]\nmetrics: { buckets: { itl: [0] } }', /'metrics.buckets.itl\[0\]' must be > 0/],
  ]
  for (const [yaml, want] of cases) failsWith(t, () => loadConfig(file('case.yaml', yaml), {}), want, yaml)
})

t.test('the provider values are auto and every provider of the parser registry, cohere included', async (t) => {
  t.same([...PROVIDERS].sort(), ['auto', ...REGISTRY.map((p) => p.name)].sort())
  t.ok(PROVIDERS.includes('cohere'))
  for (const provider of PROVIDERS) t.equal(validateConfig({ routes: [{ prefix: '/a', upstream: 'http://x', provider }] }).routes[0].provider, provider)
})

t.test('trailing slashes in a prefix are dropped so /a and /a/ are the same route', async (t) => {
  const c = validateConfig({ routes: [{ prefix: '/a/', upstream: 'http://x' }] })
  t.equal(c.routes[0].prefix, '/a')
  t.equal(c.routes[0].provider, 'auto')
  t.equal(c.routes[0].inject_usage, false)
})
