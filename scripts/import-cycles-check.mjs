// Fails on an import cycle in src/, between files or between the top folders of src/, unless
// an import the allowlist (scripts/import-cycles.allow.json) names closes it; and fails on a
// listed import that no longer closes a cycle, so the list stays true. Run by `npm run lint`.
//
// Two graphs, read with TypeScript's own parser (comments and strings never count):
// - files: the imports that exist at run time: `import … from`, `import '…'`, `export … from`
//   and `import('…')`. `import type` and `export type … from` are erased by tsc (with
//   verbatimModuleSyntax every other import stays), so a cycle of them costs nothing at run time.
// - folders: the top folders of src/ (src/proxy, src/timing, …; a file at the root of src/ is a
//   node of its own), every import, type-only ones too: layering is about which part knows which.
// Each allowlist entry is one edge that goes the wrong way (the import a cycle is to be broken
// at) and the issue item that removes it. The graph without the listed edges must have no cycle,
// and each listed edge must exist and lie on a cycle; with an empty list, no cycle at all.
//   { "files": [{ "import": "src/a.ts → src/b.ts", "removedBy": "issue 37 item 2" }],
//     "folders": [{ "import": "src/timing → src/metrics", "removedBy": "issue 37 item 1" }] }
//
// The check behind scripts/import-cycles.mjs: importCycles(argv, cwd) → { code, stdout, stderr }.
// Usage: node scripts/import-cycles.mjs [--src DIR] [--allow FILE] [--print]
//   --print writes the listed edges still on a cycle and every edge of a cycle no listed edge
//   breaks (the latter with an empty removedBy, which the check refuses: keep the wrong-way ones
//   and name the item that removes each).
// Exit code: 0 no cycle beyond the list; 1 a cycle not broken by a listed edge, or a listed edge
// not on a cycle; 2 a bad argument, allowlist or import.

import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { basename, dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import ts from 'typescript'

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..')
const DEFAULT_ALLOW = join(ROOT, 'scripts', 'import-cycles.allow.json')
const KINDS = ['files', 'folders']
const KIND = { files: 'between files (runtime imports)', folders: 'between top folders (every import, type-only too)' }
const ARROW = ' → '

class UsageError extends Error {}

/** Every `.ts` file under `dir` (declarations excluded), sorted. */
function sourceFiles(dir) {
  const out = []
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) out.push(...sourceFiles(path))
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path)
  }
  return out.sort()
}

/** The module specifiers of one file: `{ spec, typeOnly, dynamic }` each. */
function importsOf(path) {
  const source = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, false, ts.ScriptKind.TS)
  const found = []
  const visit = (node) => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      found.push({ spec: node.moduleSpecifier.text, typeOnly: node.importClause?.isTypeOnly === true, dynamic: false })
    } else if (
      ts.isExportDeclaration(node) &&
      node.moduleSpecifier !== undefined &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      found.push({ spec: node.moduleSpecifier.text, typeOnly: node.isTypeOnly, dynamic: false })
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments.length > 0 &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      found.push({ spec: node.arguments[0].text, typeOnly: false, dynamic: true })
    } else if (
      ts.isImportTypeNode(node) &&
      ts.isLiteralTypeNode(node.argument) &&
      ts.isStringLiteral(node.argument.literal)
    ) {
      // `typeof import('./x.ts')` in a type: erased.
      found.push({ spec: node.argument.literal.text, typeOnly: true, dynamic: false })
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

/**
 * The imports of the `.ts` files under `srcDir`, named from `srcDir`'s parent (`src/parsers/x.ts`):
 * `{ files, imports }`, each import `{ from, to, typeOnly, dynamic }`. Only relative imports of
 * files under `srcDir` count: packages, `node:` built-ins and files outside are not part of it.
 */
function readImports(srcDir) {
  const rel = sourceFiles(srcDir).map((p) => relative(srcDir, p).split(sep).join('/'))
  const known = new Set(rel)
  const name = (file) => `${basename(srcDir)}/${file}`
  const imports = []
  for (const file of rel) {
    for (const { spec, typeOnly, dynamic } of importsOf(join(srcDir, file))) {
      if (!spec.startsWith('./') && !spec.startsWith('../')) continue
      const target = relative(srcDir, resolve(srcDir, dirname(file), spec))
        .split(sep)
        .join('/')
      if (target.startsWith('../')) continue
      const to = [target, target.replace(/\.js$/, '.ts')].find((t) => known.has(t))
      if (to === undefined) {
        if (/\.[cm]?[jt]s$/.test(target))
          throw new UsageError(`${name(file)}: the import '${spec}' names no file under ${srcDir}`)
        continue // a JSON or other asset: no imports of its own
      }
      imports.push({ from: name(file), to: name(to), typeOnly, dynamic })
    }
  }
  return { files: rel.map(name), imports }
}

/** The folder node of a file (`src/proxy/x.ts` → `src/proxy`); a file at the root of src/ is its own node. */
const topOf = (file) => {
  const parts = file.split('/')
  return parts.length > 2 ? `${parts[0]}/${parts[1]}` : file
}

/** The strongly connected components of `nodes` (Tarjan): a Map from each node to its component's number. */
function componentOf(nodes, next) {
  let index = 0
  const idx = new Map()
  const low = new Map()
  const stack = []
  const onStack = new Set()
  const comp = new Map()
  const strong = (v) => {
    idx.set(v, index)
    low.set(v, index)
    index++
    stack.push(v)
    onStack.add(v)
    for (const w of next(v)) {
      if (!idx.has(w)) {
        strong(w)
        low.set(v, Math.min(low.get(v), low.get(w)))
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)))
    }
    if (low.get(v) !== idx.get(v)) return
    let w
    do {
      w = stack.pop()
      onStack.delete(w)
      comp.set(w, v)
    } while (w !== v)
  }
  for (const v of nodes) if (!idx.has(v)) strong(v)
  return comp
}

/**
 * The cycles of a graph: `{ onCycle, components }`. `edges` is a Map from `a → b` to a line
 * saying why (the import that makes it); `onCycle` the keys of the edges whose ends are in one
 * strongly connected component, `components` each such component of two or more nodes:
 * `{ members, steps }`, steps the lines of its edges.
 */
function cyclesOf(nodes, edges) {
  const succ = new Map(nodes.map((n) => [n, []]))
  for (const key of edges.keys()) {
    const [a, b] = key.split(ARROW)
    succ.get(a).push(b)
  }
  const comp = componentOf(nodes, (v) => succ.get(v))
  const onCycle = new Set()
  const byComp = new Map()
  for (const key of [...edges.keys()].sort()) {
    const [a, b] = key.split(ARROW)
    if (comp.get(a) !== comp.get(b)) continue
    onCycle.add(key)
    if (!byComp.has(comp.get(a))) byComp.set(comp.get(a), { members: new Set(), steps: [] })
    const c = byComp.get(comp.get(a))
    c.members.add(a).add(b)
    c.steps.push(`${key}: ${edges.get(key)}`)
  }
  const components = [...byComp.values()].map((c) => ({ members: [...c.members].sort(), steps: c.steps }))
  return { onCycle, components: components.sort((x, y) => (x.members[0] < y.members[0] ? -1 : 1)) }
}

/**
 * The two graphs of `srcDir`: `{ files, folders, fileCount }`, each graph `{ nodes, edges }` with
 * `edges` a Map from `a → b` to the line that says why.
 */
function graphsOf(srcDir) {
  const { files, imports } = readImports(srcDir)
  const runtime = new Map()
  const layered = new Map()
  const add = (map, key, line) => {
    if (!map.has(key)) map.set(key, new Set())
    map.get(key).add(line)
  }
  for (const i of imports) {
    if (!i.typeOnly) add(runtime, `${i.from}${ARROW}${i.to}`, i.dynamic ? 'import()' : 'import')
    const [a, b] = [topOf(i.from), topOf(i.to)]
    if (a !== b) add(layered, `${a}${ARROW}${b}`, `${i.from}${ARROW}${i.to}`)
  }
  // A file edge says whether it is only an import() (it runs later); a folder edge names its imports.
  const fileWhy = new Map([...runtime].map(([k, v]) => [k, v.has('import') ? 'import' : 'import() only']))
  const folderWhy = new Map(
    [...layered].map(([k, v]) => {
      const list = [...v]
      return [k, list.length > 3 ? `${list.slice(0, 3).join(', ')} and ${list.length - 3} more` : list.join(', ')]
    }),
  )
  return {
    files: { nodes: files, edges: fileWhy },
    folders: { nodes: [...new Set(files.map(topOf))].sort(), edges: folderWhy },
    fileCount: files.length,
  }
}

/** The allowlist at `path`: `{ files, folders }`, each a Map from `a → b` to its removedBy. */
function readAllowlist(path) {
  const list = { files: new Map(), folders: new Map() }
  if (!existsSync(path)) throw new UsageError(`no allowlist at ${path}`)
  let json
  try {
    json = JSON.parse(readFileSync(path, 'utf8'))
  } catch (err) {
    throw new UsageError(`${path} is not JSON: ${err.message}`)
  }
  for (const kind of Object.keys(json))
    if (!KINDS.includes(kind)) throw new UsageError(`${path}: unknown key '${kind}' (only 'files' and 'folders')`)
  for (const kind of KINDS) {
    const entries = json[kind] ?? []
    if (!Array.isArray(entries)) throw new UsageError(`${path}: '${kind}' must be a list`)
    entries.forEach((e, i) => {
      const at = `${path}: ${kind}[${i}]`
      if (typeof e?.import !== 'string' || e.import.split(ARROW).length !== 2)
        throw new UsageError(`${at}: 'import' must be "a${ARROW}b"`)
      if (typeof e.removedBy !== 'string' || e.removedBy.trim() === '')
        throw new UsageError(`${at}: 'removedBy' must name the issue item that removes ${e.import}`)
      if (list[kind].has(e.import)) throw new UsageError(`${at}: ${e.import} is listed twice`)
      list[kind].set(e.import, e.removedBy)
    })
  }
  return list
}

/**
 * Runs the check as the command line asks (`argv` without node and the script) and returns what
 * the command prints and its exit code; never throws on a bad argument, allowlist or import.
 */
export function importCycles(argv, cwd = process.cwd()) {
  try {
    return check(argv, cwd)
  } catch (err) {
    if (!(err instanceof UsageError) && !String(err.code).startsWith('ERR_PARSE_ARGS_')) throw err
    return { code: 2, stdout: '', stderr: `import-cycles: ${err.message}\n` }
  }
}

function check(argv, cwd) {
  const { values } = parseArgs({
    args: argv,
    options: { src: { type: 'string' }, allow: { type: 'string' }, print: { type: 'boolean' } },
    strict: true,
    allowPositionals: false,
  })
  const srcDir = resolve(cwd, values.src ?? join(ROOT, 'src'))
  if (!existsSync(srcDir)) throw new UsageError(`no folder ${srcDir}`)
  const allowPath = resolve(cwd, values.allow ?? DEFAULT_ALLOW)
  const shown = relative(cwd, allowPath).startsWith('..') ? allowPath : relative(cwd, allowPath)
  const allow = readAllowlist(allowPath)
  const graphs = graphsOf(srcDir)
  const found = {}
  for (const kind of KINDS) {
    const { nodes, edges } = graphs[kind]
    const all = cyclesOf(nodes, edges)
    const rest = cyclesOf(nodes, new Map([...edges].filter(([key]) => !allow[kind].has(key))))
    const gone = [...allow[kind]].filter(([key]) => !all.onCycle.has(key))
    found[kind] = { all, rest, gone }
  }

  if (values.print === true) {
    const entries = (kind) => [
      ...[...allow[kind]]
        .filter(([key]) => found[kind].all.onCycle.has(key))
        .map(([key, removedBy]) => ({ import: key, removedBy })),
      ...[...found[kind].rest.onCycle].map((key) => ({ import: key, removedBy: '' })),
    ]
    return {
      code: 0,
      stdout: `${JSON.stringify({ files: entries('files'), folders: entries('folders') }, null, 2)}\n`,
      stderr: '',
    }
  }

  const lines = []
  const cycles = KINDS.flatMap((kind) => found[kind].rest.components.map((c) => ({ kind, ...c })))
  if (cycles.length > 0) {
    lines.push(
      `import-cycles: ${cycles.length} import cycle${cycles.length === 1 ? '' : 's'} in ${basename(srcDir)}/ that no import ${shown} lists breaks:`,
    )
    for (const { kind, members, steps } of cycles) {
      lines.push(`  ${KIND[kind]}: ${members.join(', ')}`)
      for (const step of steps) lines.push(`    ${step}`)
    }
    lines.push(
      'Break it: move what both sides need into a module (or folder) below both, or pass it in instead of importing it.',
    )
  }
  const gone = KINDS.flatMap((kind) => found[kind].gone.map(([key, removedBy]) => ({ kind, key, removedBy })))
  if (gone.length > 0) {
    lines.push(
      `import-cycles: ${shown} lists ${gone.length} import${gone.length === 1 ? '' : 's'} no longer on a cycle: remove ${gone.length === 1 ? 'it' : 'them'} from the list:`,
    )
    for (const { kind, key, removedBy } of gone) lines.push(`  ${KIND[kind]}: ${key} (${removedBy})`)
  }
  if (lines.length > 0) return { code: 1, stdout: '', stderr: `${lines.join('\n')}\n` }
  const listed = allow.files.size + allow.folders.size
  return {
    code: 0,
    stdout: `import-cycles: ${basename(srcDir)}/ (${graphs.fileCount} files) has no import cycle beyond those the ${listed} imports in ${shown} close\n`,
    stderr: '',
  }
}
