import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import t from 'tap'
import { ROOT } from './helpers/paths.ts'
import { parseMetrics, sumOf } from './helpers/prometheus.ts'
import { startUpstream } from './helpers/upstream.ts'
import { eventually } from './helpers/eventually.ts'

// The package as npm would publish it: packed, installed into a fresh folder, run with npx.

const npm = (args: string[], cwd: string): string =>
  execFileSync('npm', args, { cwd, encoding: 'utf8', env: { ...process.env, npm_config_loglevel: 'error', npm_config_fund: 'false', npm_config_audit: 'false', npm_config_update_notifier: 'false' } })

const dir = mkdtempSync(join(tmpdir(), 'tokentap-pack-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))

// dist/src is current: tap's `before` (test/helpers/build-dist.mjs) builds it, declarations
// included, when a source is newer. Not rebuilt here: other test files run from dist/ meanwhile.
const packed = JSON.parse(npm(['pack', '--ignore-scripts', '--json', '--pack-destination', dir], ROOT)) as { filename: string; files: { path: string }[] }[]
const tarball = join(dir, packed[0].filename)
const app = join(dir, 'app')
execFileSync('mkdir', ['-p', app])
writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'tokentap-try', private: true, type: 'module' }))
// npm's warnings kept (EBADENGINE is one): installing on the Node running the tests must print none.
const installed = spawnSync('npm', ['install', '--prefer-offline', '--no-package-lock', tarball], {
  cwd: app,
  encoding: 'utf8',
  env: { ...process.env, npm_config_loglevel: 'warn', npm_config_fund: 'false', npm_config_audit: 'false', npm_config_update_notifier: 'false' },
})
if (installed.status !== 0) throw new Error(`npm install of the packed package failed: ${installed.stderr}`)

interface Running {
  readonly proxy: string
  readonly admin: string
  stop(): Promise<number | null>
}

/**
 * The installed `tokentap` bin (what `npx tokentap` runs) in the fresh folder, until it says where
 * it listens. Started directly rather than through npx, which does not pass SIGTERM on.
 */
async function npx(args: string[]): Promise<Running> {
  const child = spawn(join(app, 'node_modules', '.bin', 'tokentap'), args, { cwd: app, stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  const ready = await new Promise<{ proxy: string; admin: string }>((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      try {
        const j = JSON.parse(line) as { msg?: string; proxy?: string; admin?: string }
        if (j.msg === 'tokentap listening') resolve({ proxy: j.proxy as string, admin: j.admin as string })
      } catch {
        // not a log line
      }
    })
    child.once('exit', (code) => reject(new Error(`npx tokentap exited with ${code} before listening`)))
  })
  const local = (address: string): string => `http://127.0.0.1:${address.split(':').pop()}`
  return {
    proxy: local(ready.proxy),
    admin: local(ready.admin),
    stop: async () => {
      child.kill('SIGTERM')
      return exited
    },
  }
}

const chat = (url: string, headers: Record<string, string> = {}): Promise<string> =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [] }) }).then((r) => r.text())

t.test(`installing the packed package on Node ${process.versions.node} prints no engine warning: every dependency accepts the Node lines package.json's engines does`, async (t) => {
  t.notMatch(installed.stderr, /EBADENGINE|Unsupported engine/)
  const engines = (JSON.parse(readFileSync(join(app, 'node_modules', 'tokentap', 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node
  t.equal(engines, '>=20.18.1', "undici's own floor")
})

t.test('the packed package holds the compiled plugin, its types and the default config, and no tests or bench', async (t) => {
  const files = packed[0].files.map((f) => f.path)
  t.ok(files.includes('dist/src/index.js'))
  t.ok(files.includes('dist/src/index.d.ts'))
  t.ok(files.includes('dist/src/bin.js'))
  t.ok(files.includes('config/default.yaml'))
  t.notOk(
    files.some((f) => f.startsWith('test/') || f.startsWith('bench/') || f.startsWith('dist/bench/') || f.startsWith('src/')),
    'no sources, tests or bench',
  )
  const installed = join(app, 'node_modules', 'tokentap')
  t.ok(existsSync(join(installed, 'dist', 'src', 'http-proxy.d.ts')))
  t.notOk(readFileSync(join(installed, 'dist', 'src', 'index.d.ts'), 'utf8').includes(".ts'"), 'declarations import .js files')
  const exported = execFileSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      "const m = await import('tokentap'); const h = await import('tokentap/http-proxy'); console.log(typeof m.default, typeof m.tokentapReplyOptions, typeof m.buildApp, typeof h.tokentapReplyOptions)",
    ],
    { cwd: app, encoding: 'utf8' },
  )
  t.equal(exported.trim(), 'function function function function', 'the plugin, the http-proxy helper and buildApp are exported')
})

t.test('npx tokentap --help prints the usage and exits 0', async (t) => {
  const out = execFileSync('npx', ['--no-install', 'tokentap', '--help'], { cwd: app, encoding: 'utf8' })
  t.match(out, /Usage: tokentap/)
  t.match(out, /--upstream URL/)
})

t.test('npx tokentap runs the default config and measures a stream through /sim', async (t) => {
  const running = await npx(['--port', '0', '--admin-port', '0'])
  const plan = JSON.stringify({
    ttft_ms: 5,
    first_tokens: 1,
    chunks: [
      [5, 1],
      [5, 2],
    ],
  })
  const text = await chat(`${running.proxy}/sim/v1/chat/completions`, { 'x-tokentap-sim': plan })
  t.ok(text.endsWith('data: [DONE]\n\n'))
  // The request is recorded on close, in the server process: ask until it shows.
  const m = await eventually(
    'the request in the metrics',
    async () => parseMetrics(await (await fetch(`${running.admin}/metrics`)).text()),
    (m) => sumOf(m, 'llm_requests_total') > 0,
  )
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { route: '/sim' }), 1)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', { route: '/sim' }), 3, 'N − k_1 = 4 − 1')
  // The live page's script is built apart from tsc's output (scripts/build-client.mjs): the package carries it.
  const script = await fetch(`${running.admin}/live/app.js`)
  t.equal(script.status, 200, "the live page's script is in the package")
  t.match(await script.text(), "new EventSource('/live/events')")
  t.equal(await running.stop(), 0, 'SIGTERM drains and exits 0')
})

t.test('npx tokentap --upstream URL is a one-route proxy with no config file', async (t) => {
  const sse = 'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: {"choices":[{"index":0,"delta":{"content":" b"}}]}\n\ndata: [DONE]\n\n'
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end(sse)
  })
  t.teardown(() => upstream.close())
  const running = await npx(['--upstream', upstream.url, '--provider', 'openai', '--port', '0', '--admin-port', '0'])
  t.equal(await chat(`${running.proxy}/v1/chat/completions`), sse, 'the bytes arrive unchanged')
  t.equal(upstream.requests[0].url, '/v1/chat/completions')
  // The request is recorded on close, in the server process: ask until it shows.
  const m = await eventually(
    'the request in the metrics',
    async () => parseMetrics(await (await fetch(`${running.admin}/metrics`)).text()),
    (m) => sumOf(m, 'llm_requests_total') > 0,
  )
  t.equal(sumOf(m, 'llm_requests_total', { provider: 'openai', route: '/', outcome: 'ok' }), 1)
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count'), 1)
  t.equal(await running.stop(), 0)
})
