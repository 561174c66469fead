// tsc rewrites relative imports from `.ts` to `.js` in the JavaScript it emits, not in .d.ts files,
// which a package's users resolve as JavaScript would: this does it for the declarations under `dir`.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export function rewriteDeclarations(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name)
    if (entry.isDirectory()) rewriteDeclarations(p)
    else if (entry.name.endsWith('.d.ts')) {
      const text = readFileSync(p, 'utf8')
      const fixed = text.replace(/(from\s+|import\()(['"])(\.{1,2}\/[^'"]+)\.ts\2/g, '$1$2$3.js$2')
      if (fixed !== text) writeFileSync(p, fixed)
    }
  }
}
