import { spawnSync } from 'node:child_process'

/**
 * Finds an external tool (promtool, prometheus) on PATH. Locally a missing tool skips the test
 * that needs it, saying so; in CI (`CI=true`, where .ci/run installs it) a missing tool fails.
 */
export function findTool(t: { fail(message: string): unknown; pass(message: string, extra: { skip: string }): unknown }, name: string): string | undefined {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' })
  const path = found.status === 0 ? found.stdout.trim() : ''
  if (path !== '') return path
  if (process.env.CI === 'true') t.fail(`${name} is not installed, and CI must run this test (apt-get install prometheus)`)
  else t.pass(`${name} is needed`, { skip: `${name} is not installed (apt-get install prometheus to run this; with CI=true it fails instead)` })
  return undefined
}

/** Runs a tool and returns its exit status and combined output. */
export function run(cmd: string, args: readonly string[], input?: string, cwd?: string): { status: number | null; output: string } {
  const r = spawnSync(cmd, args, { input, cwd, encoding: 'utf8', timeout: 60_000 })
  return { status: r.status, output: `${r.stdout ?? ''}${r.stderr ?? ''}` }
}
