import { closeSync, openSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import pino from 'pino'
import t from 'tap'
import type { Test } from 'tap'
import { validateConfig } from '../src/config/load-config.ts'
import { closeLogger, createLogger, writeInfoLine } from '../src/logger.ts'

// writeInfoLine writes the per-request line without pino's per-key serializing: it must write
// exactly what logger.info(fields, msg) writes, or nothing (and say so, so the caller uses pino).

const config = validateConfig({ log: { level: 'info' }, routes: [{ prefix: '/t', upstream: 'http://127.0.0.1:9' }] })

/** Lines written to a file by createLogger's logger (with `base`, its bindings), `time` made equal (the clock moves between two calls). */
async function linesOf(write: (logger: ReturnType<typeof createLogger>) => void, base?: Record<string, unknown>): Promise<string[]> {
  const file = join(t.testdir({}), 'log')
  const fd = openSync(file, 'w')
  const logger = createLogger(config, fd, base)
  write(logger)
  await closeLogger(logger)
  closeSync(fd)
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => l.replace(/^\{"level":30,"time":\d+,/, '{"level":30,"time":0,'))
}

const SAME: [string, Record<string, unknown>][] = [
  [
    'a request line',
    {
      request_id: 'tt-1a-2b',
      route: '/t',
      provider: 'openai',
      model: 'gpt-4o-mini',
      model_label: undefined,
      method: 'POST',
      path: '/v1/chat/completions',
      status: 200,
      outcome: 'ok',
      error: undefined,
      ttft_ms: 1.234,
      e2e_ms: 2.5,
      output_tokens: 3,
      tps: 1279.31,
      bytes_in: 160,
      bytes_out: 1200,
    },
  ],
  ['quotes and backslashes', { model: 'a"b\\c', path: '/x\\"' }],
  ['control characters', { model: 'a\nb\tc\u0001', error_detail: '\u001f' }],
  ['non-ASCII text, a surrogate pair, U+2028 and DEL', { model: 'été 日本 🎉 \u2028 \u007f' }],
  ['a long string with quotes', { model: `${'x"'.repeat(80)}\n` }],
  ['numbers JSON has no literal for, and edge values', { a: Number.NaN, b: Number.POSITIVE_INFINITY, c: -0, d: 1e21, e: 1e-7, f: 0.1 + 0.2, g: -5 }],
  ['integer-like keys', { 2: 'two', 1: 'one', z: 'zed' }],
  ['a key named msg', { msg: 'inner' }],
  ['no defined field', { a: undefined }],
  ['no field at all', {}],
]

/** Each SAME case through pino, then through writeInfoLine; returns the lines pino wrote after checking each pair is equal. */
async function pinoLinesMatched(t: Test, base?: Record<string, unknown>): Promise<string[]> {
  const lines = await linesOf((logger) => {
    for (const [what, fields] of SAME) {
      logger.info(fields, 'request')
      t.ok(writeInfoLine(logger, fields, 'request'), `${what}: written`)
    }
  }, base)
  t.equal(lines.length, SAME.length * 2)
  for (const [i, [what]] of SAME.entries()) t.equal(lines[2 * i + 1], lines[2 * i], what)
  return lines.filter((_, i) => i % 2 === 0)
}

t.test('a line written by writeInfoLine is the line pino writes for the same fields', async (t) => {
  await pinoLinesMatched(t)
})

t.test('a cluster worker’s logger (its pid bound) writes through writeInfoLine the line pino writes', async (t) => {
  const [first] = await pinoLinesMatched(t, { pid: 4242 })
  t.match(first, /^\{"level":30,"time":0,"pid":4242,"request_id":"tt-1a-2b",/, 'the binding after time, before the fields, as pino writes it')
})

const FALLBACK: [string, Record<string, unknown>][] = [
  ['a lone surrogate in a short string (pino writes it raw)', { model: 'x\ud800' }],
  ['a boolean', { ok: true }],
  ['an object', { nested: { a: 1 } }],
  ['an err key', { err: 'x' }],
  ['a redacted root', { headers: 'x' }],
]

t.test('writeInfoLine writes nothing where its text could differ from pino’s', async (t) => {
  const lines = await linesOf((logger) => {
    for (const [what, fields] of FALLBACK) t.notOk(writeInfoLine(logger, fields, 'request'), what)
    const child = logger.child({ worker: 1 })
    t.notOk(writeInfoLine(child, { a: 1 }, 'request'), 'a child logger (its bindings are pino’s to write)')
  })
  t.same(lines, [])
  const other = pino({ base: undefined }, { write: () => undefined })
  t.notOk(writeInfoLine(other, { a: 1 }, 'request'), 'a logger createLogger did not make')
})
