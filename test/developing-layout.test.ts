import t from 'tap'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { repoPath } from './helpers/paths.ts'

// DEVELOPING.md's layout is the newcomer's map: one line a folder of src/, and every path it names exists.
const developing = readFileSync(repoPath('DEVELOPING.md'), 'utf8')
const block = /## Layout\n```\n([\s\S]*?)\n```/.exec(developing)?.[1] ?? ''
const entries = block
  .split('\n')
  .filter((line) => /^\S/.test(line))
  .map((line) => line.split(/\s+/)[0])

function folders(dir: string): string[] {
  const out = [`${dir}/`]
  for (const e of readdirSync(repoPath(dir), { withFileTypes: true })) if (e.isDirectory()) out.push(...folders(join(dir, e.name)))
  return out
}

t.test('the layout section names every folder of src/ once', async (t) => {
  t.ok(entries.length > 0, 'the layout block is found')
  for (const folder of folders('src')) t.equal(entries.filter((e) => e === folder).length, 1, `${folder} has one line`)
})

t.test('every path the layout section names exists', async (t) => {
  for (const entry of entries) t.ok(existsSync(repoPath(entry)), `${entry} exists`)
})

t.test('the src/ line names every file at the root of src/', async (t) => {
  const root = block.slice(block.indexOf('src/ '), block.indexOf('\nsrc/config/'))
  for (const f of readdirSync(repoPath('src')).filter((f) => f.endsWith('.ts'))) t.ok(root.includes(f), `${f} is described`)
})
