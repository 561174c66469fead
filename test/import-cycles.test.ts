import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import t from 'tap'
import type { Test } from 'tap'
import { repoPath } from './helpers/paths.ts'

// scripts/import-cycles.mjs (run by `npm run lint`) on small trees written for each test: its
// check in this process (TypeScript's parser loads once), the command itself in a child once.

interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const { importCycles } = (await import(pathToFileURL(repoPath('scripts', 'import-cycles-check.mjs')).href)) as { importCycles: (argv: string[], cwd: string) => Run }

/** Writes `files` (paths under a fresh folder) and the allowlist (unless null) there; the folder. */
function tree(t: Test, files: Record<string, string>, allow: object | null): string {
  const root = mkdtempSync(join(tmpdir(), 'tokentap-cycles-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true })
    writeFileSync(join(root, path), text)
  }
  if (allow !== null) writeFileSync(join(root, 'allow.json'), JSON.stringify(allow))
  return root
}

/** The check on the tree's src/ with its allow.json, from the tree's folder. */
function check(t: Test, files: Record<string, string>, allow: object | null = {}, args: string[] = []): Run {
  return importCycles(['--src', 'src', '--allow', 'allow.json', ...args], tree(t, files, allow))
}

/** Files and folders that import each other one way only; type-only and commented imports back. */
const LAYERED = {
  'src/app.ts': "import { p } from './proxy/p.ts'\nimport 'node:fs'\nimport { x } from 'some-package'\nimport pkg from '../package.json' with { type: 'json' }\nexport const app = p + x + pkg\n",
  'src/proxy/p.ts': "import { t } from '../timing/t.ts'\nexport { u } from './u.ts'\nexport const p = t\n",
  // A type-only import back: erased at run time, and inside one folder, so no cycle of either kind.
  'src/proxy/u.ts': "import type { P } from './p.ts'\nexport type Q = typeof import('./p.ts')\nexport const u: P | 1 = 1\n",
  'src/timing/t.ts': "// import('../app.ts') in a comment is no import, nor is the string below\nexport const t = \"import '../proxy/p.ts'\"\nexport const data = import('./data.json')\n",
  'src/timing/data.json': '{}',
  'src/types.d.ts': "import '../app.ts'\n",
}

t.test('a tree whose files and top folders import each other one way only passes', async (t) => {
  const r = check(t, LAYERED)
  t.same(r, { code: 0, stdout: 'import-cycles: src/ (4 files) has no import cycle beyond those the 0 imports in allow.json close\n', stderr: '' })
  const root = tree(t, LAYERED, {})
  const fromSrc = importCycles(['--src', '.', '--allow', '../allow.json'], join(root, 'src'))
  t.equal(
    fromSrc.stdout,
    `import-cycles: src/ (4 files) has no import cycle beyond those the 0 imports in ${join(root, 'allow.json')} close\n`,
    'an allowlist outside the folder is named by its full path',
  )
})

t.test('with no arguments it checks the repository src/ against scripts/import-cycles.allow.json', async (t) => {
  const r = importCycles([], repoPath())
  t.match(r, { code: 0, stdout: /^import-cycles: src\/ \(\d+ files\) has no import cycle beyond those the \d+ imports in scripts\/import-cycles\.allow\.json close\n$/, stderr: '' })
})

t.test('two files that import each other at run time fail, with the cycle and how each import is made', async (t) => {
  const r = check(t, {
    ...LAYERED,
    'src/timing/t.ts': "export const t = 1\nexport const later = () => import('./s.ts')\n",
    'src/timing/s.ts': "import { t } from './t.ts'\nexport const s = t\n",
  })
  t.equal(r.code, 1)
  t.equal(r.stdout, '')
  t.equal(
    r.stderr,
    [
      'import-cycles: 1 import cycle in src/ that no import allow.json lists breaks:',
      '  between files (runtime imports): src/timing/s.ts, src/timing/t.ts',
      '    src/timing/s.ts → src/timing/t.ts: import',
      '    src/timing/t.ts → src/timing/s.ts: import() only',
      'Break it: move what both sides need into a module (or folder) below both, or pass it in instead of importing it.',
      '',
    ].join('\n'),
  )
})

t.test('a type-only import from a lower folder back up is a cycle between the folders, not between the files', async (t) => {
  const r = check(t, { ...LAYERED, 'src/timing/t.ts': "import type { P } from '../proxy/u.ts'\nexport const t: P | 1 = 1\n" })
  t.equal(r.code, 1)
  t.equal(
    r.stderr,
    [
      'import-cycles: 1 import cycle in src/ that no import allow.json lists breaks:',
      '  between top folders (every import, type-only too): src/proxy, src/timing',
      '    src/proxy → src/timing: src/proxy/p.ts → src/timing/t.ts',
      '    src/timing → src/proxy: src/timing/t.ts → src/proxy/u.ts',
      'Break it: move what both sides need into a module (or folder) below both, or pass it in instead of importing it.',
      '',
    ].join('\n'),
  )
})

t.test('a file at the root of src/ is a node of its own among the folders', async (t) => {
  const back = "import type { app } from '../app.ts'\nexport const t: typeof app = 1\n"
  const r = check(t, { ...LAYERED, 'src/timing/t.ts': back, 'src/timing/t2.ts': back, 'src/timing/t3.ts': back, 'src/timing/t4.ts': back })
  t.equal(r.code, 1)
  t.match(r.stderr, /^ {2}between top folders \(every import, type-only too\): src\/app\.ts, src\/proxy, src\/timing\n/m)
  t.match(r.stderr, /^ {4}src\/timing → src\/app\.ts: src\/timing\/t\.ts → src\/app\.ts, src\/timing\/t2\.ts → src\/app\.ts, src\/timing\/t3\.ts → src\/app\.ts and 1 more$/m)
})

t.test('a cycle broken at an import the allowlist names passes, and the list is printed back with its reasons', async (t) => {
  const files = { ...LAYERED, 'src/timing/t.ts': "import type { P } from '../proxy/u.ts'\nexport const t: P | 1 = 1\n" }
  const allow = { folders: [{ import: 'src/timing → src/proxy', removedBy: 'issue 1 item 2' }] }
  t.same(check(t, files, allow), { code: 0, stdout: 'import-cycles: src/ (4 files) has no import cycle beyond those the 1 imports in allow.json close\n', stderr: '' })
  const printed = check(t, files, allow, ['--print'])
  t.equal(printed.code, 0)
  t.same(JSON.parse(printed.stdout), { files: [], folders: [{ import: 'src/timing → src/proxy', removedBy: 'issue 1 item 2' }] })
})

t.test('--print lists every import of a cycle no listed import breaks, with an empty reason to fill in', async (t) => {
  const printed = check(t, { ...LAYERED, 'src/timing/t.ts': "import { p } from '../proxy/p.ts'\nexport const t = 1\n" }, {}, ['--print'])
  t.equal(printed.code, 0)
  t.same(JSON.parse(printed.stdout), {
    files: [
      { import: 'src/proxy/p.ts → src/timing/t.ts', removedBy: '' },
      { import: 'src/timing/t.ts → src/proxy/p.ts', removedBy: '' },
    ],
    folders: [
      { import: 'src/proxy → src/timing', removedBy: '' },
      { import: 'src/timing → src/proxy', removedBy: '' },
    ],
  })
})

t.test('an allowlisted import that no longer closes a cycle fails, so the list stays true', async (t) => {
  const r = check(t, LAYERED, {
    files: [{ import: 'src/proxy/u.ts → src/proxy/p.ts', removedBy: 'issue 1 item 3' }],
    folders: [{ import: 'src/proxy → src/timing', removedBy: 'issue 1 item 4' }],
  })
  t.equal(r.code, 1)
  t.equal(
    r.stderr,
    [
      'import-cycles: allow.json lists 2 imports no longer on a cycle: remove them from the list:',
      '  between files (runtime imports): src/proxy/u.ts → src/proxy/p.ts (issue 1 item 3)',
      '  between top folders (every import, type-only too): src/proxy → src/timing (issue 1 item 4)',
      '',
    ].join('\n'),
  )
})

t.test('an allowlist entry without the item that removes it, or a missing allowlist, is refused with exit code 2', async (t) => {
  const unnamed = check(t, LAYERED, { folders: [{ import: 'src/proxy → src/timing', removedBy: ' ' }] })
  t.equal(unnamed.code, 2)
  t.match(unnamed.stderr, /folders\[0\]: 'removedBy' must name the issue item that removes src\/proxy → src\/timing\n$/)
  const malformed = check(t, LAYERED, { folders: [{ import: 'src/proxy -> src/timing', removedBy: 'x' }] })
  t.equal(malformed.code, 2)
  t.match(malformed.stderr, /folders\[0\]: 'import' must be "a → b"\n$/)
  const missing = check(t, LAYERED, null)
  t.equal(missing.code, 2)
  t.match(missing.stderr, /^import-cycles: no allowlist at .*allow\.json\n$/)
})

t.test('each mistake in the allowlist or the arguments is refused with a line that names it', async (t) => {
  const refused = (allow: unknown, args: string[] = []): string => {
    const root = tree(t, LAYERED, null)
    writeFileSync(join(root, 'allow.json'), typeof allow === 'string' ? allow : JSON.stringify(allow))
    const r = importCycles(['--src', 'src', '--allow', 'allow.json', ...args], root)
    t.equal(r.code, 2)
    return r.stderr
  }
  t.match(refused('{ files: [] }'), /^import-cycles: \S+allow\.json is not JSON: /)
  t.match(refused({ layers: [] }), /allow\.json: unknown key 'layers' \(only 'files' and 'folders'\)\n$/)
  t.match(refused({ files: {} }), /allow\.json: 'files' must be a list\n$/)
  const twice = { import: 'src/proxy → src/timing', removedBy: 'x' }
  t.match(refused({ folders: [twice, twice] }), /allow\.json: folders\[1\]: src\/proxy → src\/timing is listed twice\n$/)
  t.match(refused({}, ['--src', 'nowhere']), /^import-cycles: no folder \S+nowhere\n$/)
  t.match(refused({}, ['--bogus']), /^import-cycles: Unknown option '--bogus'/)
})

t.test('an import of a file that does not exist is an error, not a smaller graph', async (t) => {
  const r = check(t, { ...LAYERED, 'src/proxy/u.ts': "export { gone } from './gone.ts'\n" })
  t.equal(r.code, 2)
  t.match(r.stderr, /^import-cycles: src\/proxy\/u\.ts: the import '\.\/gone\.ts' names no file under \S+tokentap-cycles-\w+\/src\n$/)
})

t.test('the command prints what the check says on the stream it names and exits with its code', async (t) => {
  const root = tree(t, { ...LAYERED, 'src/timing/s.ts': "import './t.ts'\n", 'src/timing/t.ts': "import './s.ts'\nimport type { p } from '../proxy/p.ts'\n" }, {})
  const r = spawnSync(process.execPath, [repoPath('scripts', 'import-cycles.mjs'), '--src', 'src', '--allow', 'allow.json'], { cwd: root, encoding: 'utf8' })
  t.same([r.status, r.stdout, r.stderr], [1, '', importCycles(['--src', 'src', '--allow', 'allow.json'], root).stderr])
  t.match(r.stderr, /^import-cycles: 2 import cycles in src\/ /)
})
