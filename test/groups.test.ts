import t from 'tap'
import { existsSync, readdirSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { groupFiles, ownProcessFiles } from './groups/run-group.ts'

// Every compiled test file runs exactly once: in its directory's group (test/groups/) or in a
// process of its own (named in package.json's tap.include).
const DIST_TEST = fileURLToPath(new URL('./', import.meta.url))
const ROOT = join(DIST_TEST, '..', '..')

function testFiles(dir: string): string[] {
  const out: string[] = []
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) {
      if (entry.name !== 'groups' && entry.name !== 'helpers') out.push(...testFiles(path))
    } else if (entry.name.endsWith('.test.js')) out.push(relative(ROOT, path))
  }
  return out
}

t.test('every test file runs once, in its group or in a process of its own', async (t) => {
  const own = ownProcessFiles()
  for (const path of own) t.ok(existsSync(join(ROOT, path)), `${path}, named to run alone, exists`)
  const ran = new Map<string, number>()
  for (const path of own) ran.set(path, 1)
  for (const group of readdirSync(join(DIST_TEST, 'groups')).filter((f) => f.endsWith('.test.js'))) {
    const dir = group === 'root.test.js' ? '' : group.replace(/\.test\.js$/, '')
    for (const path of groupFiles(dir)) {
      const key = relative(ROOT, path)
      ran.set(key, (ran.get(key) ?? 0) + 1)
    }
  }
  const all = testFiles(DIST_TEST).sort()
  t.same(
    all.filter((p) => ran.get(p) !== 1),
    [],
    'no test file is left out or run twice',
  )
  t.same(
    [...ran.keys()].filter((p) => !all.includes(p)),
    [],
    'nothing else is run',
  )
})
