import type { Socket } from 'node:net'
import { Agent, buildConnector } from 'undici'
import type { Test } from 'tap'
import { startProxy } from './proxy.ts'
import type { RunningProxy } from './proxy.ts'

/**
 * A proxy with its sockets in view, for tests of what it buffers: the upstream connections of
 * its undici agent and the client connections of its listener. `config` adds to the proxy's
 * configuration (its one route is `/up` → `upstreamUrl`).
 */
export async function proxyWithSockets(
  t: Test,
  upstreamUrl: string,
  agent: Omit<Agent.Options, 'connect'> = {},
  config: Record<string, unknown> = {},
): Promise<{ proxy: RunningProxy; upstreamSockets: Socket[]; clientSockets: Socket[] }> {
  const upstreamSockets: Socket[] = []
  const connector = buildConnector({})
  const dispatcher = new Agent({
    ...agent,
    connect: (opts, cb) =>
      connector(opts, (err, socket) => {
        if (socket !== null) upstreamSockets.push(socket as Socket)
        cb(err, socket as never)
      }),
  })
  t.teardown(() => dispatcher.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstreamUrl }], ...config }, { dispatcher })
  t.teardown(() => proxy.close())
  const clientSockets: Socket[] = []
  proxy.app.server.on('connection', (s: Socket) => clientSockets.push(s))
  return { proxy, upstreamSockets, clientSockets }
}
