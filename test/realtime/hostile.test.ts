import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import t from 'tap'
import type { Test } from 'tap'
import { Opcode, encodeFrame } from '../../src/realtime/frame.ts'
import type { SessionSummary } from '../../src/realtime/session.ts'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { acceptRaw, closeCodesIn, eventually, startWsUpstream, tapedClient } from '../helpers/realtime.ts'
import type { WsUpstream } from '../helpers/realtime.ts'

/**
 * Hostile frames through the proxy. It passes frames as they are (the endpoint that receives
 * them judges them, and its close code goes back through); what the proxy holds to measure
 * stays within `limits.max_event_bytes`, and it stays up for the next session.
 */

const LIMIT = 4096

interface Setup {
  proxy: RunningProxy
  upstream: WsUpstream
  sessions: SessionSummary[]
  /** The most bytes any open session's measuring side held, sampled by the upstream as it writes. */
  most: () => number
  sample: () => void
  /** What the hostile upstream read from the proxy (the client's frames). */
  read: Buffer[]
  url: string
}

async function setup(write: (socket: Duplex, s: { sample: () => void }) => void): Promise<Setup> {
  let most = 0
  let proxy: RunningProxy | undefined
  const sample = (): void => {
    for (const session of proxy?.app.tokentap.realtime.open ?? []) most = Math.max(most, session.held)
  }
  const read: Buffer[] = []
  const upstream = await startWsUpstream({
    onUpgrade: (req: IncomingMessage, socket: Duplex) => {
      if (req.url?.startsWith('/hostile') !== true) return false
      acceptRaw(req, socket)
      socket.on('data', (c: Buffer) => {
        read.push(c)
        // Like any server, it ends the connection once the client sent its close (the flood stops too).
        if (!socket.writableEnded && closeCodesIn(Buffer.concat(read)).length > 0) socket.end()
      })
      socket.on('error', () => {})
      write(socket, { sample })
      return true
    },
  })
  proxy = await startProxy({ limits: { max_event_bytes: LIMIT }, routes: [{ prefix: '/rt', upstream: upstream.url, provider: 'openai' }] })
  const sessions: SessionSummary[] = []
  proxy.app.tokentap.realtime.listen({ session: (_w, _l, s) => sessions.push(s) })
  return { proxy, upstream, sessions, most: () => most, sample, read, url: `${proxy.url.replace('http', 'ws')}/rt` }
}

/** The proxy still relays a plain session after the hostile one. */
async function stillUp(t: Test, s: Setup): Promise<void> {
  s.upstream.connections.length = 0
  const echo = tapedClient(`${s.url}/v1/realtime`)
  await echo.opened
  const conn = await s.upstream.connection(1)
  conn.ws.send('still here')
  t.equal((await echo.message(1)).data.toString(), 'still here', 'the next session is relayed')
  echo.ws.close(1000)
  await echo.closed
  await eventually('no session left open', () => s.proxy.app.tokentap.realtime.open.size === 0)
}

/** Writes frames while the socket takes them, until it closes. */
function flood(socket: Duplex, next: () => Buffer, sample: () => void): void {
  const pump = (): void => {
    while (!socket.destroyed && !socket.writableEnded) {
      sample()
      if (!socket.write(next())) {
        socket.once('drain', pump)
        return
      }
    }
  }
  pump()
}

t.test('a frame announcing 2^40 bytes: the client closes with 1009, the upstream gets it, the proxy holds nothing of it', async (t) => {
  const s = await setup((socket, { sample }) => {
    socket.write(Buffer.from([0x82, 127, 0, 0, 1, 0, 0, 0, 0, 0]))
    const block = Buffer.alloc(64 * 1024, 7)
    flood(socket, () => block, sample)
  })
  const client = tapedClient(`${s.url}/hostile`, { maxPayload: 1024 * 1024 })
  await client.opened
  await client.closed
  await eventually('the client’s 1009 at the upstream', () => closeCodesIn(Buffer.concat(s.read)).includes(1009))
  await eventually('the session record', () => s.sessions.length === 1)
  t.equal(s.most(), 0, 'a message over the limit is never held')
  t.equal(s.sessions[0].outcome, 'error')
  t.same(s.sessions[0].close, { from: 'client', code: 1009, reason: '' })
  await stillUp(t, s)
  await s.upstream.close()
  await s.proxy.close()
})

t.test('a message fragmented forever: the client closes with 1009, the proxy holds at most its limit', async (t) => {
  const s = await setup((socket, { sample }) => {
    const first = encodeFrame(Opcode.text, Buffer.from('{'), false)
    first[0] = 0x01 // FIN clear: more fragments follow
    socket.write(first)
    const fragment = encodeFrame(Opcode.continuation, Buffer.alloc(1000, 0x61), false)
    fragment[0] = 0x00
    flood(socket, () => fragment, sample)
  })
  const client = tapedClient(`${s.url}/hostile`, { maxPayload: 256 * 1024 })
  await client.opened
  await client.closed
  await eventually('the client’s 1009 at the upstream', () => closeCodesIn(Buffer.concat(s.read)).includes(1009))
  t.ok(s.most() <= LIMIT, `held at most ${s.most()} bytes of it (limit ${LIMIT})`)
  await eventually('the session record', () => s.sessions.length === 1)
  t.equal(s.sessions[0].unread, 0, 'the message never ended, so it was never read')
  await stillUp(t, s)
  await s.upstream.close()
  await s.proxy.close()
})

t.test('invalid UTF-8 in a text frame: passed as it came; the client closes with 1007 and the upstream gets that code', async (t) => {
  const s = await setup((socket) => {
    socket.write(encodeFrame(Opcode.text, Buffer.from([0x7b, 0xc3, 0x28, 0xff, 0x7d]), false))
  })
  const client = tapedClient(`${s.url}/hostile`)
  await client.opened
  await client.closed
  await eventually('the client’s 1007 at the upstream', () => closeCodesIn(Buffer.concat(s.read)).includes(1007))
  await eventually('the session record', () => s.sessions.length === 1)
  t.equal(s.sessions[0].outcome, 'error')
  t.equal(s.sessions[0].close?.code, 1007)
  await stillUp(t, s)
  await s.upstream.close()
  await s.proxy.close()
})

t.test('bytes that are not frames: relayed as they are, measuring stops and says why, the session still ends', async (t) => {
  const s = await setup((socket) => {
    socket.write(Buffer.from([0x83, 0x00, 0xde, 0xad]))
  })
  const client = tapedClient(`${s.url}/hostile`)
  await client.opened
  await client.closed
  await eventually('the client’s 1002 at the upstream', () => closeCodesIn(Buffer.concat(s.read)).includes(1002))
  await eventually('the session record', () => s.sessions.length === 1)
  t.equal(s.sessions[0].parseError, 'reserved opcode 3')
  t.same(s.sessions[0].close, { from: 'client', code: 1002, reason: '' }, 'the other direction is still read: the client’s 1002')
  t.equal(s.sessions[0].outcome, 'error')
  await stillUp(t, s)
  await s.upstream.close()
  await s.proxy.close()
})

t.test('a client that floods the upstream with an oversized frame: the upstream closes with 1009, back through the proxy', async (t) => {
  const upstream = await startWsUpstream({ maxPayload: 64 * 1024 })
  const proxy = await startProxy({ limits: { max_event_bytes: LIMIT }, routes: [{ prefix: '/rt', upstream: upstream.url, provider: 'openai' }] })
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime`)
  await client.opened
  client.ws.send(Buffer.alloc(1024 * 1024, 1))
  const closed = await client.closed
  t.equal(closed.code, 1009, "the upstream's close code reached the client")
  await eventually('no session left open', () => proxy.app.tokentap.realtime.open.size === 0)
  await upstream.close()
  await proxy.close()
})
