import { spawnSync } from 'node:child_process'
import { readdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

/**
 * tap's `before` script: builds `dist/` when any source is newer than the last build, so the
 * tests that start the real server as a child process (server-process.ts, graceful-shutdown,
 * cluster) run compiled JavaScript, not TypeScript through the test runner's loader (which made
 * a child take over a minute to start on a loaded machine). One build per run, before any test.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const STAMP = join(ROOT, 'dist', '.built-for-tests')

function newest(dir: string): number {
  let latest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) latest = Math.max(latest, newest(path))
    else if (entry.name.endsWith('.ts')) latest = Math.max(latest, statSync(path).mtimeMs)
  }
  return latest
}

const mtime = (path: string): number => {
  try {
    return statSync(path).mtimeMs
  } catch {
    return 0
  }
}

const sources = Math.max(newest(join(ROOT, 'src')), newest(join(ROOT, 'bench')), mtime(join(ROOT, 'tsconfig.json')), mtime(join(ROOT, 'tsconfig.build.json')))
if (sources > mtime(STAMP) || mtime(join(ROOT, 'dist', 'src', 'server.js')) === 0) {
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
  const r = spawnSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.build.json')], { cwd: ROOT, stdio: 'inherit' })
  if (r.status !== 0) {
    console.error('build-dist: tsc failed; the child-process tests would run a stale dist/')
    process.exit(1)
  }
  writeFileSync(STAMP, `${new Date().toISOString()}\n`)
}
