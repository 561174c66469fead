// The build: tsc, then the declarations' relative imports from `.ts` to `.js` (declarations.mjs),
// then the live page's script (build-client.mjs), then a stamp that build-if-stale.mjs compares
// sources against. `npm test`'s build (test/helpers/build-dist.mjs) makes the same dist/src and
// writes the same stamp.
import { execFileSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildClient } from './build-client.mjs'
import { rewriteDeclarations } from './declarations.mjs'

const root = fileURLToPath(new URL('..', import.meta.url))
execFileSync(
  process.execPath,
  [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.build.json')],
  { stdio: 'inherit' },
)
rewriteDeclarations(join(root, 'dist', 'src'))
const clientErrors = await buildClient(root)
if (clientErrors !== '') {
  console.error(clientErrors)
  process.exit(1)
}
writeFileSync(join(root, 'dist', '.build-stamp'), `${new Date().toISOString()}\n`)
