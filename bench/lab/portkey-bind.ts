import net from 'node:net'

/**
 * Preloaded into the Portkey gateway by the benchmark (`--import …/portkey-bind.js`): its
 * `serve()` passes no hostname, so Node would listen on every interface. A listen with a port
 * and no host binds 127.0.0.1 instead; the bench's traffic stays on loopback.
 */

const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (this: net.Server, ...args: unknown[]): net.Server {
  if (typeof args[0] === 'number') {
    if (args[1] === undefined) args[1] = '127.0.0.1'
    else if (typeof args[1] === 'function') args.splice(1, 0, '127.0.0.1')
  }
  return (listen as (...a: unknown[]) => net.Server).apply(this, args)
} as typeof listen
