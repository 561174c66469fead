// `npm start`'s first step: compile only when a source is newer than the last build, so a
// start on an up-to-date build costs no compile (tsc takes seconds warm, far more cold).
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const stamp = join(root, 'dist', '.build-stamp')

// Sources only: a bench run writes results under bench/, which the build does not read.
function newest(dir) {
  let t = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name)
    if (entry.isDirectory()) t = Math.max(t, newest(p))
    else if (entry.name.endsWith('.ts')) t = Math.max(t, statSync(p).mtimeMs)
  }
  return t
}

const inputs = ['src', 'bench'].map((d) => newest(join(root, d)))
for (const f of [
  'tsconfig.json',
  'tsconfig.build.json',
  'src/admin/live/client/tsconfig.json',
  'package-lock.json',
  'scripts/build.mjs',
  'scripts/build-client.mjs',
])
  inputs.push(statSync(join(root, f)).mtimeMs)
const built = existsSync(stamp) ? statSync(stamp).mtimeMs : 0
if (Math.max(...inputs) > built)
  execFileSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { stdio: 'inherit' })
