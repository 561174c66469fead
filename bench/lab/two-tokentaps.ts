import { openSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'
import Fastify, { LogController } from 'fastify'
import pino from 'pino'
import tokentap from '../../src/plugin.ts'

/**
 * Two tokentap plugin instances in one process, for `traces-same-process`: `/off` without spans and
 * `/on` with `otel.traces` at `--ratio`, each registered in its own encapsulated context, both
 * forwarding to `--upstream`, with the same log line per request (to a file, so stdout carries only
 * the port line).
 * `node dist/bench/lab/two-tokentaps.js --port 0 --upstream URL --traces URL [--ratio 0.1] [--log FILE]`; prints `{"port":N}`.
 */

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    upstream: { type: 'string' },
    traces: { type: 'string' },
    ratio: { type: 'string', default: '0.1' },
    log: { type: 'string', default: '/dev/null' },
  },
})
if (values.upstream === undefined || values.traces === undefined) throw new Error('--upstream and --traces are required')
const upstream = values.upstream
const logger = pino({ level: 'info', base: undefined }, pino.destination({ fd: openSync(values.log, 'a'), sync: false, minLength: 8192 }))
const app = Fastify({ loggerInstance: logger, logController: new LogController({ disableRequestLogging: true }) })
await app.register(async (off) => {
  await off.register(tokentap, { routes: [{ prefix: '/off', upstream, provider: 'openai' }] })
})
await app.register(async (on) => {
  await on.register(tokentap, {
    routes: [{ prefix: '/on', upstream, provider: 'openai' }],
    otel: { traces: { endpoint: values.traces, sample: { ratio: Number(values.ratio) } } },
  })
})
await app.listen({ host: '127.0.0.1', port: Number(values.port) })
process.stdout.write(`${JSON.stringify({ port: (app.server.address() as AddressInfo).port })}\n`)
