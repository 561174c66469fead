// The suite's build. One tsc run over tsconfig.json typechecks src, test and bench and emits them
// to dist/, so tap runs the compiled tests (dist/test/**/*.test.js, with source maps: coverage is
// reported on the .ts sources) and child processes start dist/src/*.js. No test process loads
// TypeScript: through tap's ts-node loader a test file cost about 6 CPU-s before its first
// assertion, compiled about 0.7. Incremental (dist/.tests.tsbuildinfo), so a second run re-checks
// only what changed. Then outputs whose source is gone are removed (a renamed test would still
// run), and a stamp is written. With declarations, rewritten as scripts/build.mjs does: dist/src is
// then the package build too, and its stamp (.build-stamp) spares the package test and `npm start`
// a second compile. Then the live page's script, type-checked with the DOM library
// (scripts/build-client.mjs).
//
// `--check` (`npm test`'s first step): always, and type errors fail it.
// No flag (tap's `before`): only when a source is newer than the stamp, so `npx tap
// test/x.test.ts` finds dist/src current for the tests that start the server as a child process;
// type errors are printed but do not stop that one test.
// It lives under test/ because tap records coverage in the `before` process too, and c8 leaves
// test/** out of the report.
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const DIST = join(ROOT, 'dist')
const STAMP = join(DIST, '.built-for-tests')
const PACKAGE_STAMP = join(DIST, '.build-stamp') // scripts/build-if-stale.mjs
const BUILD_INFO = join(DIST, '.tests.tsbuildinfo')
const TREES = ['src', 'test', 'bench']
// The live page's script (scripts/build-client.mjs, imported only to build: as declarations.mjs,
// it would otherwise show in the coverage of tap's `before` process).
const CLIENT_CONFIG = join(ROOT, 'src', 'admin', 'live', 'client', 'tsconfig.json')
const CLIENT_OUT = join(DIST, 'src', 'admin', 'live', 'client', 'app.js')

const mtime = (path) => (existsSync(path) ? statSync(path).mtimeMs : 0)

function newest(dir) {
  let latest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) latest = Math.max(latest, newest(path))
    else if (entry.name.endsWith('.ts')) latest = Math.max(latest, statSync(path).mtimeMs)
  }
  return latest
}

/** True when a source or a tsconfig changed since the last build, or an output it needs is missing. */
function stale() {
  const configs = [join(ROOT, 'tsconfig.json'), CLIENT_CONFIG, join(ROOT, 'package-lock.json'), join(ROOT, 'scripts', 'build-client.mjs')].map(mtime)
  const sources = Math.max(...TREES.map((d) => newest(join(ROOT, d))), ...configs)
  return sources > mtime(STAMP) || !existsSync(join(DIST, 'src', 'server.js')) || !existsSync(join(DIST, 'test')) || !existsSync(CLIENT_OUT)
}

/** Removes emitted files (`x.js`, `x.js.map`, `x.d.ts`) whose `x.ts` is gone, and emptied folders. */
function prune(dir, sourceDir) {
  if (!existsSync(dir)) return
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) {
      prune(path, join(sourceDir, entry.name))
      if (readdirSync(path).length === 0) rmSync(path, { recursive: true })
      continue
    }
    const base = entry.name.replace(/(\.d\.ts|\.js\.map|\.js)$/, '')
    if (base !== entry.name && !existsSync(join(sourceDir, `${base}.ts`))) rmSync(path)
  }
}

/** Typechecks and emits; returns the process exit code to use. */
async function buildTests(ifStale) {
  if (ifStale && !stale()) return 0
  // tsc's incremental state says nothing about outputs deleted since: rebuild whole then.
  if (!existsSync(join(DIST, 'src', 'server.js')) || !existsSync(join(DIST, 'test'))) rmSync(BUILD_INFO, { force: true })
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
  const r = spawnSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.json'), '--declaration', '--incremental', '--tsBuildInfoFile', BUILD_INFO], { cwd: ROOT, stdio: 'inherit' })
  for (const tree of TREES) prune(join(DIST, tree), join(ROOT, tree))
  const { buildClient } = await import('../../scripts/build-client.mjs')
  const clientErrors = await buildClient(ROOT)
  if (clientErrors !== '') console.error(clientErrors)
  if (r.status !== 0 || clientErrors !== '') {
    // tsc still emitted the JavaScript (noEmitOnError is off): one test can run on it. No stamp,
    // so the next run checks again.
    console.error(`build-dist: tsc found errors (${r.status === 0 ? 'in the live page script' : `exit ${r.status ?? r.signal}`})${ifStale ? '; npm test fails on them' : ''}`)
    return ifStale ? 0 : 1
  }
  const { rewriteDeclarations } = await import('../../scripts/declarations.mjs')
  rewriteDeclarations(join(DIST, 'src'))
  const now = `${new Date().toISOString()}\n`
  writeFileSync(STAMP, now)
  writeFileSync(PACKAGE_STAMP, now)
  return 0
}

const check = process.argv.includes('--check')
process.exitCode = await buildTests(!check)
if (check && process.exitCode === 0) console.log('build-dist: typechecked, dist/ current')
