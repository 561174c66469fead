import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

/**
 * Test files share a process, a directory at a time: each tap process pays about 1.5 CPU-s of
 * runner loaders and 1.7 s of importing the app under them before its first assertion, which
 * was most of the suite's CPU. A group imports every `*.test.js` of its directory (not of its
 * subdirectories) in name order; their top-level tests queue on the one root test, as tap runs
 * them in a file of their own.
 *
 * The files that must keep a process of their own (long waits that would hold a group back, a
 * process-wide hook, memory figures that others' garbage would blur) are the ones package.json's
 * `tap.include` names one by one: that list is the one home of the fact, and the groups skip
 * what it names. test/groups.test.ts checks that every test file runs exactly once.
 */

const DIST_TEST = fileURLToPath(new URL('../', import.meta.url))
const ROOT = join(DIST_TEST, '..', '..')

/** Paths (from the repository root, `dist/test/…`) that tap runs in a process of their own. */
export function ownProcessFiles(): Set<string> {
  const include = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { tap: { include: string[] } }).tap.include
  return new Set(include.filter((p) => !p.includes('*')))
}

/** The test files of a directory under dist/test ('' for dist/test itself) that its group runs. */
export function groupFiles(dir: string): string[] {
  const own = ownProcessFiles()
  const abs = join(DIST_TEST, dir)
  return readdirSync(abs)
    .filter((f) => f.endsWith('.test.js'))
    .sort()
    .map((f) => join(abs, f))
    .filter((path) => !own.has(relative(ROOT, path)))
}

export async function runGroup(dir: string): Promise<void> {
  for (const path of groupFiles(dir)) await import(pathToFileURL(path).href)
}
