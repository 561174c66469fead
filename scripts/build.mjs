// The build: tsc, then the declarations' relative imports from `.ts` to `.js` (tsc rewrites them
// in the JavaScript it emits, not in .d.ts files, which a package's users resolve as JavaScript
// would), then a stamp that build-if-stale.mjs compares sources against.
import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' })

function rewrite(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name)
    if (entry.isDirectory()) rewrite(p)
    else if (entry.name.endsWith('.d.ts')) {
      const text = readFileSync(p, 'utf8')
      const fixed = text.replace(/(from\s+|import\()(['"])(\.{1,2}\/[^'"]+)\.ts\2/g, '$1$2$3.js$2')
      if (fixed !== text) writeFileSync(p, fixed)
    }
  }
}
rewrite(join(root, 'dist', 'src'))
writeFileSync(join(root, 'dist', '.build-stamp'), `${new Date().toISOString()}\n`)
