// The live page's script: src/admin/live/client/app.ts, type-checked with the DOM library by its own
// tsconfig (it imports types only, from live-message-types.ts and uplot), emitted to
// dist/src/admin/live/client/app.js, where register-live.ts reads it. The page loads it as a
// classic script, so the emitted code must hold no import or export, and is wrapped in a function
// in strict mode: the scope and strictness its module source has. Both builds run it
// (scripts/build.mjs and test/helpers/build-dist.mjs).
import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'

const CLIENT_DIR = join('src', 'admin', 'live', 'client')
const CLIENT_OUT = join('dist', 'src', 'admin', 'live', 'client', 'app.js')

/**
 * Type-checks and emits the client under `root`; resolves to the type errors as tsc prints them
 * ('' when none). The script is emitted either way. TypeScript is loaded here only: a build that
 * is current does not pay for it.
 */
export async function buildClient(root) {
  const ts = (await import('typescript')).default
  const format = (diagnostics) =>
    ts.formatDiagnostics(diagnostics, {
      getCanonicalFileName: (f) => f,
      getCurrentDirectory: () => root,
      getNewLine: () => '\n',
    })
  const fail = (diagnostics) => {
    throw new Error(format(diagnostics))
  }
  const configFile = join(root, CLIENT_DIR, 'tsconfig.json')
  const parsed = ts.getParsedCommandLineOfConfigFile(
    configFile,
    { noEmit: false },
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => fail([d]) },
  )
  if (parsed.errors.length > 0) fail(parsed.errors)
  const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options })
  const source = program.getSourceFile(join(root, CLIENT_DIR, 'app.ts'))
  if (source === undefined)
    throw new Error(`build-client: ${join(CLIENT_DIR, 'app.ts')} is not in ${configFile}'s files`)
  let js
  const emitted = program.emit(source, (name, text) => {
    if (name.endsWith('.js')) js = text
  })
  const errors = format([...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics])
  if (js === undefined) throw new Error(`build-client: tsc emitted no JavaScript for app.ts\n${errors}`)
  const module = /^\s*(import|export)\b/m.exec(js)
  if (module !== null)
    throw new Error(
      `build-client: the page loads app.js as a classic script, but the emitted code has module syntax (an import of a value?): ${module[0].trim()}`,
    )
  const out = join(root, CLIENT_OUT)
  mkdirSync(dirname(out), { recursive: true })
  writeFileSync(out, `'use strict'\n;(() => {\n${js}})()\n`)
  return errors
}
