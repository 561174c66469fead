import { spawn } from 'node:child_process'
import t from 'tap'
import { parseCli, USAGE } from '../src/cli.ts'
import type { CliCommand } from '../src/cli.ts'
import { distPath } from './helpers/paths.ts'

const CLI = distPath('src/bin.js')

const run = (cmd: CliCommand) => {
  if (cmd.kind !== 'run') throw new Error(`expected a config, got ${cmd.kind}: ${'message' in cmd ? cmd.message : ''}`)
  return cmd.config
}

t.test('--help and -h ask for the usage', async (t) => {
  t.same(parseCli(['--help'], {}), { kind: 'help' })
  t.same(parseCli(['-h', '--port', '1'], {}), { kind: 'help' })
  t.match(USAGE, /--upstream URL/)
  t.match(USAGE, /default: \//, 'the usage says the default prefix')
})

t.test('an unknown flag or a missing value is a usage error of one line', async (t) => {
  for (const argv of [['--bogus'], ['--port'], ['-x'], ['extra']]) {
    const cmd = parseCli(argv, {})
    t.equal(cmd.kind, 'usage-error', argv.join(' '))
    if (cmd.kind === 'usage-error') t.notOk(cmd.message.includes('\n'), 'one line')
  }
  t.match(parseCli(['--bogus'], {}), { message: /Unknown option '--bogus'/ })
  t.match(parseCli(['--port', '70000'], {}), { kind: 'usage-error', message: /--port '70000'/ })
  t.match(parseCli(['--admin-port', 'x'], {}), { kind: 'usage-error', message: /--admin-port 'x'/ })
  t.match(parseCli(['--provider', 'openai'], {}), { kind: 'usage-error', message: /--provider needs --upstream/ })
  t.match(parseCli(['--upstream', 'http://h', '--config', 'x.yaml'], {}), { kind: 'usage-error', message: /cannot be used together/ })
})

t.test('--upstream alone makes a one-route proxy at / with the provider detected and default ports', async (t) => {
  const c = run(parseCli(['--upstream', 'https://api.openai.com'], {}))
  t.equal(c.routes.length, 1)
  t.match(c.routes[0], { prefix: '/', upstream: 'https://api.openai.com', provider: 'auto' })
  t.equal(c.server.port, 8080)
  t.equal(c.admin.port, 9464)
})

t.test('--provider, --prefix, --port and --admin-port shape the one route and the listeners', async (t) => {
  const c = run(parseCli(['--upstream', 'http://127.0.0.1:11434', '--provider', 'ollama', '--prefix', '/ollama/', '--port', '0', '--admin-port', '9999'], { TOKENTAP_PORT: '1234' }))
  t.match(c.routes[0], { prefix: '/ollama', upstream: 'http://127.0.0.1:11434', provider: 'ollama' })
  t.equal(c.server.port, 0, 'the flag wins over the environment')
  t.equal(c.admin.port, 9999)
})

t.test('a bad one-route setting names the flag, not the file key', async (t) => {
  t.match(parseCli(['--upstream', 'ftp://x'], {}), { kind: 'config-error', message: /--upstream has the wrong form/ })
  t.match(parseCli(['--upstream', 'http://x', '--provider', 'nope'], {}), { kind: 'config-error', message: /--provider must be one of auto, anthropic, bedrock, cohere/ })
})

t.test('a wrong form says what the right one is: a URL with http:// or https://, a prefix with /', async (t) => {
  t.same(parseCli(['--upstream', '127.0.0.1:18100'], {}), {
    kind: 'config-error',
    message: 'invalid configuration: --upstream has the wrong form: it must be a URL starting with http:// or https:// (e.g. http://127.0.0.1:18100)',
  })
  t.match(parseCli(['--upstream', 'http://x', '--prefix', 'openai'], {}), { kind: 'config-error', message: /--prefix has the wrong form: it must start with \/ \(e\.g\. \/openai\)/ })
})

t.test('--config loads the file, with flags over the environment over the file', async (t) => {
  const dir = t.testdir({ 'c.yaml': 'server: { port: 7000 }\nadmin: { port: 7001 }\nroutes: [{ prefix: /x, upstream: "http://127.0.0.1:1" }]\n' })
  const file = `${dir}/c.yaml`
  t.match(run(parseCli(['--config', file], {})), { server: { port: 7000 }, admin: { port: 7001 } })
  t.match(run(parseCli(['-c', file], { TOKENTAP_ADMIN_PORT: '7002' })), { admin: { port: 7002 } })
  t.match(run(parseCli([], { TOKENTAP_CONFIG: file })), { server: { port: 7000 } }, 'TOKENTAP_CONFIG names the file')
  t.match(run(parseCli(['--config', file, '--admin-port', '7003'], { TOKENTAP_ADMIN_PORT: '7002' })), { admin: { port: 7003 } })
  t.match(parseCli(['--config', `${dir}/missing.yaml`], {}), { kind: 'config-error', message: /cannot read config file/ })
})

t.test('TOKENTAP_LOG_LEVEL=verbose is an error naming the environment variable', async (t) => {
  const cmd = parseCli(['--upstream', 'http://x'], { TOKENTAP_LOG_LEVEL: 'verbose' })
  t.match(cmd, { kind: 'config-error', message: /^environment variable TOKENTAP_LOG_LEVEL='verbose' is not valid: must be one of fatal, error, warn, info, debug, trace, silent$/ })
  t.notMatch((cmd as { message: string }).message, /log\.level/)
  t.match(run(parseCli(['--upstream', 'http://x'], { TOKENTAP_LOG_LEVEL: 'debug' })), { log: { level: 'debug' } })
})

/** The real command (the built src/bin.ts, the package's bin). */
function command(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s))
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s))
    child.once('close', (code) => resolve({ code, stdout, stderr }))
  })
}

t.test('the tokentap command: --help exits 0, an unknown flag exits 2 with one line and the usage, a bad environment exits 1; no stack traces', async (t) => {
  const [help, bogus, env] = await Promise.all([command(['--help']), command(['--port', '1234', '--bogus']), command(['--upstream', 'http://127.0.0.1:1'], { TOKENTAP_LOG_LEVEL: 'verbose' })])
  t.same([help.code, help.stdout, help.stderr], [0, USAGE, ''])
  t.equal(bogus.code, 2)
  t.equal(bogus.stdout, '')
  t.equal(bogus.stderr, `tokentap: Unknown option '--bogus'\n\n${USAGE}`)
  t.equal(env.code, 1)
  t.equal(env.stderr, "tokentap: environment variable TOKENTAP_LOG_LEVEL='verbose' is not valid: must be one of fatal, error, warn, info, debug, trace, silent\n")
  for (const r of [help, bogus, env]) t.notMatch(r.stderr, /\n\s+at /, 'no stack trace')
})
