import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { constants, createInflateRaw, deflateRawSync } from 'node:zlib'
import pino from 'pino'
import t from 'tap'
import { Agent } from 'undici'
import type { Dispatcher } from 'undici'

/**
 * The three places tokentap reaches past a dependency's public API, each for a figure it measured
 * (see the comments at the use). If an upgrade changes what they rely on, these fail, loudly,
 * instead of tokentap silently losing the gain or misbehaving.
 */

t.test('undici: the controller onResponseStart gets holds the raw head as Buffers that can be dropped (client-writer.ts)', async (t) => {
  // client-writer.ts reads `rawHeaders` (the header bytes as received, order and case kept) and
  // then nulls it, so the socket read the Buffers are views of is not kept alive for the stream.
  const server = createServer((_req, res) => {
    res.setHeader('X-Mixed-Case', 'v')
    res.end('body')
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const agent = new Agent()
  t.teardown(() => agent.close())
  const seen = await new Promise<{ raw: unknown; body: string }>((resolve, reject) => {
    let raw: unknown
    let body = ''
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart() {},
      onResponseStart(controller) {
        const c = controller as unknown as { rawHeaders: unknown }
        raw = c.rawHeaders
        c.rawHeaders = null
      },
      onResponseData(_controller, chunk) {
        body += chunk.toString()
      },
      onResponseEnd() {
        resolve({ raw, body })
      },
      onResponseError(_controller, err) {
        reject(err)
      },
    }
    agent.dispatch({ origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, path: '/', method: 'GET' }, handler)
  })
  t.ok(Array.isArray(seen.raw), 'rawHeaders is an array')
  const raw = seen.raw as unknown[]
  t.ok(
    raw.every((b) => Buffer.isBuffer(b)),
    'of Buffers',
  )
  t.ok((raw as Buffer[]).map((b) => b.toString()).includes('X-Mixed-Case'), 'names as the upstream wrote them')
  t.equal(seen.body, 'body', 'dropping it leaves the response intact')
})

t.test('pino: a logger’s bindings are one JSON text in its chindings (empty without), a child has its own (logger.ts)', async (t) => {
  // writeInfoLine (logger.ts) writes the root logger's chindings string as pino does: after time, before the fields.
  const root = pino({ base: undefined }, { write: () => {} })
  const sym = pino.symbols.chindingsSym
  t.equal((root as unknown as Record<symbol, unknown>)[sym], '', 'no bindings: an empty string')
  const child = root.child({ listener: 'admin' })
  t.match((child as unknown as Record<symbol, unknown>)[sym], /"listener":"admin"/, 'a child: its bindings as JSON text')
  const bound = pino({ base: { pid: 7 } }, { write: () => {} })
  t.equal((bound as unknown as Record<symbol, unknown>)[sym], ',"pid":7', 'base bindings (a worker’s pid): the text pino puts after time')
})

t.test('node:zlib: an inflate stream’s binding inflates synchronously into a given buffer and says what is left; a data error destroys the stream at once (permessage-deflate.ts)', async (t) => {
  // MessageInflater steps a direction's one inflate stream with `_handle.writeSync`, reading
  // [output space left, input left] from `_writeState`, as zlib's own *Sync functions do.
  const stream = createInflateRaw({ windowBits: 15 })
  stream.on('error', () => {})
  const internals = stream as unknown as {
    _handle: { writeSync(flush: number, input: Buffer, inOff: number, inLen: number, out: Buffer, outOff: number, outLen: number): void }
    _writeState: Uint32Array
  }
  const handle = internals._handle
  const state = internals._writeState
  t.type(handle.writeSync, 'function')
  t.ok(state instanceof Uint32Array && state.length === 2)
  const input = deflateRawSync(Buffer.from('hello hello hello'), { finishFlush: constants.Z_SYNC_FLUSH })
  const out = Buffer.alloc(32)
  handle.writeSync(constants.Z_SYNC_FLUSH, input, 0, input.length, out, 4, 5)
  t.same([...state], [0, state[1]], 'the output space is used up')
  t.ok(state[1] > 0, 'and input is left')
  t.equal(out.toString('utf8', 4, 9), 'hello')
  handle.writeSync(constants.Z_SYNC_FLUSH, input, input.length - state[1], state[1], out, 9, 23)
  t.same([...state], [23 - 12, 0])
  t.equal(out.toString('utf8', 4, 21), 'hello hello hello', 'the same stream went on where it stopped')
  stream.reset()
  handle.writeSync(constants.Z_SYNC_FLUSH, Buffer.from([0xff, 0xff]), 0, 2, out, 0, 32)
  t.equal(stream.errored?.message, 'invalid block type', 'a data error is the stream’s `errored`, set synchronously')
  t.equal(stream.destroyed, true)
})
