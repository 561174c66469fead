import { createHash, randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { connect } from 'node:net'
import type { Socket } from 'node:net'
import { constants, deflateRawSync } from 'node:zlib'
import t from 'tap'
import type { Test } from 'tap'
import { Opcode, encodeFrame } from '../../src/realtime/frame.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startRawUpstream } from '../helpers/raw-socket.ts'
import type { RawUpstream } from '../helpers/raw-socket.ts'
import { eventually, startWsUpstream, tapedClient } from '../helpers/realtime.ts'
import { startServerProcess } from '../helpers/server-process.ts'
import type { ServerProcess } from '../helpers/server-process.ts'

/**
 * What one client's framing and compression cost the proxy's measuring side, against the
 * proxy in a process of its own (its RSS is its own): tiny frames do not pin memory, small
 * compression bombs do not stall another stream, and every ITL gap of a long response counts.
 */

const MAX_EVENT = 1024 * 1024

/** The proxy process's resident set (Linux). */
const rssOf = (pid: number): number => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) * 1024

/** A raw WebSocket upstream: answers each upgrade with a bare 101 (`extensions` added) and counts the bytes it reads after it. */
async function rawWsUpstream(extensions?: string): Promise<{ upstream: RawUpstream; received: () => number; sockets: Socket[] }> {
  let received = 0
  const sockets: Socket[] = []
  const upstream = await startRawUpstream((socket, head) => {
    const key = /sec-websocket-key:\s*(\S+)/i.exec(head)?.[1]
    const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64')
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n${extensions === undefined ? '' : `Sec-WebSocket-Extensions: ${extensions}\r\n`}\r\n`,
    )
    socket.on('data', (c: Buffer) => {
      received += c.length
    })
    sockets.push(socket)
  })
  return { upstream, received: () => received, sockets }
}

/** A raw client through the proxy: resolves with its socket once the 101 came. */
function rawClient(port: number, path: string, extensions?: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(
        `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\n${extensions === undefined ? '' : `Sec-WebSocket-Extensions: ${extensions}\r\n`}\r\n`,
      )
    })
    let head = ''
    const onData = (c: Buffer): void => {
      head += c.toString('latin1')
      if (!head.includes('\r\n\r\n')) return
      socket.off('data', onData)
      if (head.startsWith('HTTP/1.1 101')) resolve(socket)
      else reject(new Error(head))
    }
    socket.on('data', onData)
    socket.on('error', reject)
  })
}

/** Writes `bytes` in 64 KiB pieces, each when the socket takes it. */
async function writeAll(socket: Socket, bytes: Buffer): Promise<void> {
  for (let i = 0; i < bytes.length; i += 64 * 1024) {
    if (!socket.write(bytes.subarray(i, i + 64 * 1024))) await new Promise((r) => socket.once('drain', r))
  }
}

/** `n` masked one-byte continuation frames (the client's), or unmasked (the upstream's). */
function tinyFrames(n: number, masked: boolean): Buffer {
  const one = masked ? 7 : 3
  const out = Buffer.alloc(n * one)
  for (let i = 0; i < n; i++) {
    const at = i * one
    out[at] = 0x00 // FIN clear, continuation
    out[at + 1] = masked ? 0x81 : 0x01
    out[at + one - 1] = 0x61 // mask key 0: the byte as it is
  }
  return out
}

/** The first frame of a fragmented text message (FIN clear). */
function opening(masked: boolean): Buffer {
  const f = encodeFrame(Opcode.text, Buffer.from('{'), masked)
  f[0] = 0x01
  return f
}

async function proxyProcess(t: Test, upstreamUrl: string): Promise<{ server: ServerProcess; port: number; pid: number }> {
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    limits: { max_event_bytes: MAX_EVENT },
    routes: [{ prefix: '/rt', upstream: upstreamUrl, provider: 'openai' }],
  })
  t.teardown(() => server.kill())
  const listening = await server.waitForLog((l) => l.msg === 'tokentap listening')
  const port = Number(/:(\d+)\/?$/.exec(String(listening.proxy))?.[1])
  return { server, port, pid: server.child.pid as number }
}

t.test('a message of a million one-byte frames from the client, then a million from the upstream: the proxy holds a megabyte, not a Buffer per frame', async (t) => {
  const { upstream, received, sockets } = await rawWsUpstream()
  t.teardown(() => upstream.close())
  const { port, pid } = await proxyProcess(t, upstream.url)
  const client = await rawClient(port, '/rt/v1/realtime')
  const upstreamSocket = await (async () => {
    await eventually('the upstream connection', () => sockets.length === 1)
    return sockets[0]
  })()
  let fromUpstream = 0
  client.on('data', (c: Buffer) => {
    fromUpstream += c.length
  })

  // Baseline: the same bytes in large frames of a message over the limit (passed, never held).
  const fragment = (fin: boolean): Buffer => {
    const f = encodeFrame(Opcode.continuation, Buffer.alloc(64 * 1024, 0x61), true)
    if (!fin) f[0] = 0x00
    return f
  }
  const control = Buffer.concat([opening(true), ...Array.from({ length: 109 }, () => fragment(false)), fragment(true)])
  await writeAll(client, control)
  await eventually('the control message at the upstream', () => received() >= control.length, 30_000)
  const baseline = rssOf(pid)
  // RSS moves by ±30 MiB between two readings of the same process on a busy machine (garbage not yet
  // collected when the baseline is read); a Buffer per frame held 115–135 MiB, far beyond this slack.
  const slack = 2 * MAX_EVENT + 40 * 1024 * 1024

  const tiny = tinyFrames(1_000_000, true)
  const before = received()
  await writeAll(client, Buffer.concat([opening(true), tiny]))
  await eventually('the million frames at the upstream', () => received() - before >= tiny.length, 60_000)
  const grown = rssOf(pid) - baseline
  t.ok(grown < slack, `RSS grew ${Math.round(grown / 1024)} KiB over the baseline with a million frames held open`)

  // The other way: a million one-byte frames of one message from the upstream.
  const down = Buffer.concat([opening(false), tinyFrames(1_000_000, false)])
  await writeAll(upstreamSocket, down)
  await eventually('the million frames at the client', () => fromUpstream >= down.length, 60_000)
  const grownDown = rssOf(pid) - baseline
  t.ok(grownDown < slack, `RSS grew ${Math.round(grownDown / 1024)} KiB with both directions' messages open`)
  client.destroy()
})

t.test('a response of 20,000 text deltas puts every gap in llm_realtime_inter_token_latency_seconds', async (t) => {
  const N = 20_000
  const upstream = await startWsUpstream({
    onConnection: (c) =>
      c.ws.on('message', () => {
        c.ws.send(JSON.stringify({ type: 'response.created', response: { id: 'resp_1' } }))
        for (let i = 0; i < N; i++) c.ws.send(JSON.stringify({ type: 'response.output_text.delta', response_id: 'resp_1', delta: 'a' }))
        c.ws.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_1', status: 'completed' } }))
      }),
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/rt', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime?model=gpt-realtime`)
  await client.opened
  client.ws.send(JSON.stringify({ type: 'response.create' }))
  await eventually('response.done', () => client.messages.length === N + 2, 60_000)
  client.ws.close(1000)
  await client.closed
  await eventually('the session recorded', () => proxy.app.tokentap.realtime.open.size === 0)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_realtime_inter_token_latency_seconds_count'), N - 1, 'one observation per gap (one token a delta)')
})

/** A permessage-deflate message as its sender writes it: raw deflate, sync flush, the 4-byte tail cut. */
function deflated(text: string): Buffer {
  const all = deflateRawSync(Buffer.from(text), { finishFlush: constants.Z_SYNC_FLUSH })
  return all.subarray(0, all.length - 4)
}

t.test('1,500 small compression bombs from one client cost the proxy about what as many ordinary messages do; the session stops inflating and says why', async (t) => {
  const ext = 'permessage-deflate; client_no_context_takeover; server_no_context_takeover'
  const { upstream, received, sockets } = await rawWsUpstream(ext)
  t.teardown(() => upstream.close())
  const { server, port, pid } = await proxyProcess(t, upstream.url)
  const cpu = (): number => {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
    return Number(f[11]) + Number(f[12])
  }
  const bomb = deflated(JSON.stringify({ type: 'input_audio_buffer.append', audio: 'A'.repeat(MAX_EVENT - 100) }))
  t.ok(bomb.length < 1200, `a bomb is ${bomb.length} bytes`)
  const frame = (payload: Buffer): Buffer => {
    const f = encodeFrame(Opcode.text, payload, true)
    f[0] |= 0x40
    return f
  }
  // Baseline: the same number of ordinary compressed messages of the same size on the wire.
  const ordinary = deflated(JSON.stringify({ type: 'input_audio_buffer.append', audio: randomBytes(800).toString('base64') }))
  const baseClient = await rawClient(port, '/rt/v1/realtime', ext)
  const cpu0 = cpu()
  const baseBytes = Buffer.concat(Array.from({ length: 1500 }, () => frame(ordinary)))
  await writeAll(baseClient, baseBytes)
  await eventually('the ordinary messages at the upstream', () => received() >= baseBytes.length, 60_000)
  const baseCpu = cpu() - cpu0

  const bombClient = await rawClient(port, '/rt/v1/realtime', ext)
  const cpu1 = cpu()
  const at = received()
  const bombs = Buffer.concat(Array.from({ length: 1500 }, () => frame(bomb)))
  await writeAll(bombClient, bombs)
  await eventually('the bombs at the upstream', () => received() - at >= bombs.length, 60_000)
  const bombCpu = cpu() - cpu1
  t.ok(bombCpu <= 3 * baseCpu + 50, `the proxy spent ${bombCpu} ticks of CPU on the bombs, ${baseCpu} on as many ordinary messages`)
  bombClient.destroy()
  baseClient.destroy()
  for (const s of sockets) s.destroy()
  const line = await server.waitForLog((l) => l.msg === 'realtime session' && typeof l.not_measured === 'string')
  t.match(line.not_measured, /^inflate budget/)
})
