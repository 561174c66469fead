import { openSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'
import Fastify, { LogController } from 'fastify'
import httpProxy from '@fastify/http-proxy'
import pino from 'pino'
import tokentap from '../../src/plugin.ts'
import { tokentapReplyOptions } from '../../src/http-proxy.ts'

/**
 * The benchmark's `http-proxy` path: an `@fastify/http-proxy` registration measured by tokentap
 * through `tokentapReplyOptions` (the embedding mode of docs/embedding.md), with the same log line per
 * request as tokentap's own route (to a file, so stdout carries only the port line).
 * `node dist/bench/lab/http-proxy-app.js --port 0 --upstream http://127.0.0.1:PORT`; prints `{"port":N}`.
 */

const { values } = parseArgs({ options: { port: { type: 'string', default: '0' }, upstream: { type: 'string' }, log: { type: 'string', default: '/dev/null' } } })
if (values.upstream === undefined) throw new Error('--upstream is required')
const logger = pino({ level: 'info', base: undefined }, pino.destination({ fd: openSync(values.log, 'a'), sync: false, minLength: 8192 }))
const app = Fastify({ loggerInstance: logger, logController: new LogController({ disableRequestLogging: true }) })
await app.register(tokentap, { routes: [] })
await app.register(httpProxy, { upstream: values.upstream, replyOptions: tokentapReplyOptions(app, { prefix: '/', provider: 'openai' }) })
await app.listen({ host: '127.0.0.1', port: Number(values.port) })
process.stdout.write(`${JSON.stringify({ port: (app.server.address() as AddressInfo).port })}\n`)
