import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/**
 * Paths in the repository, the same whether a test runs compiled (`npm test` runs
 * `dist/test/**\/*.test.js`, see test/helpers/build-dist.mjs) or as TypeScript through tap's loader
 * (`npx tap test/x.test.ts`): a path taken relative to `import.meta.url` would point into
 * `dist/test/` in the first case. The root is the nearest folder above this file with a
 * package.json (`dist/` has none).
 */
function findRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir)
    if (up === dir) throw new Error(`no package.json above ${fileURLToPath(import.meta.url)}`)
    dir = up
  }
  return dir
}

/** The repository's root folder. */
export const ROOT = findRoot()

/** A path under the repository's root: `repoPath('test', 'fixtures', 'x.sse')`. */
export const repoPath = (...parts: string[]): string => join(ROOT, ...parts)

/**
 * A file of the build that child processes run: `distPath('src/server.js')`. Plain node starts
 * it in well under a second, where tap's TypeScript loader took seconds (the suite builds it
 * first: test/helpers/build-dist.mjs, and tap's `before` rebuilds it when a source is newer).
 */
export const distPath = (path: string): string => join(ROOT, 'dist', path)
