// `npm run bench:lab -- TOOL [args]`: one of the opt-in research tools in bench/lab/ (outside the
// default build and type-check): builds the package, compiles bench/lab/ with its own tsconfig,
// then runs dist/bench/lab/TOOL.js with the arguments (under --expose-gc, which some tools need).
import { spawnSync } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
// A tool is a file whose comment says how to run it (`npm run bench:lab -- NAME`); the rest are its helpers.
const tools = readdirSync(join(root, 'bench', 'lab'))
  .filter((f) => f.endsWith('.ts'))
  .map((f) => f.slice(0, -3))
  .filter((name) =>
    readFileSync(join(root, 'bench', 'lab', `${name}.ts`), 'utf8').includes(`npm run bench:lab -- ${name}`),
  )
const [tool, ...args] = process.argv.slice(2)
if (tool === undefined || !tools.includes(tool)) {
  console.error(`usage: npm run bench:lab -- TOOL [args]; TOOL is one of ${tools.join(', ')}`)
  process.exit(2)
}
const run = (argv) => {
  const r = spawnSync(process.execPath, argv, { cwd: root, stdio: 'inherit' })
  if (r.status !== 0) process.exit(r.status ?? 1)
}
run([join(root, 'scripts', 'build.mjs')])
run([join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'bench', 'lab', 'tsconfig.json')])
run(['--expose-gc', join(root, 'dist', 'bench', 'lab', `${tool}.js`), ...args])
