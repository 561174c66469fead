import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import t from 'tap'
import { waitFor } from '../helpers/faults.ts'
import { distPath, ROOT } from '../helpers/paths.ts'

// SIGHUP (a closed terminal) and SIGUSR2 (nodemon's restart) used to end the process at once,
// every stream cut and no log line: they drain like SIGTERM.

const SERVER = distPath('src/server.js')
const planHeader = JSON.stringify({ ttft_ms: 10, chunks: Array.from({ length: 5 }, () => [60, 1]) })

for (const signal of ['SIGHUP', 'SIGUSR2'] as const) {
  t.test(`${signal} drains like SIGTERM: the open stream runs to its end, a log line names the signal, exit 0`, async (t) => {
    const dir = t.testdir({})
    const configFile = join(dir, 'tokentap.yaml')
    writeFileSync(
      configFile,
      [
        'server: { host: 127.0.0.1, port: 0, drain_seconds: 30 }',
        'admin: { host: 127.0.0.1, port: 0 }',
        'routes:',
        '  - prefix: /sim',
        '    simulator: { jitter_ms: 0, stall_probability: 0 }',
        '',
      ].join('\n'),
    )
    const child = spawn(process.execPath, [SERVER, '--config', configFile], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
    t.teardown(() => child.kill('SIGKILL'))
    const logs: Record<string, unknown>[] = []
    createInterface({ input: child.stdout }).on('line', (line) => {
      try {
        logs.push(JSON.parse(line) as Record<string, unknown>)
      } catch {
        logs.push({ raw: line })
      }
    })
    const exited = new Promise<number | string | null>((resolve) => child.once('exit', (code, sig) => resolve(code ?? sig)))
    await waitFor('the server to listen', () => logs.some((l) => l.msg === 'tokentap listening'), 300_000)
    const ready = logs.find((l) => l.msg === 'tokentap listening') as { proxy: string }
    const res = await fetch(`http://${ready.proxy}/sim/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tokentap-sim': planHeader },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    })
    child.kill(signal)
    t.match(await res.text(), /data: \[DONE\]/, `the stream open at ${signal} ran to its end`)
    t.equal(await exited, 0, 'the process exits 0')
    t.match(
      logs.find((l) => l.msg === 'draining'),
      { signal },
      'the drain names the signal',
    )
    t.same(
      logs.filter((l) => l.msg === 'request').map((r) => r.outcome),
      ['ok'],
    )
  })
}
