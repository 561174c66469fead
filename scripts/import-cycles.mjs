#!/usr/bin/env node
// `npm run lint`'s import-cycle check (see import-cycles-check.mjs): exit code 0, 1 or 2.
import { importCycles } from './import-cycles-check.mjs'

const { code, stdout, stderr } = importCycles(process.argv.slice(2))
process.stdout.write(stdout)
process.stderr.write(stderr)
process.exitCode = code
