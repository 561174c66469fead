import type { Socket } from 'node:net'

/**
 * Skips an upstream's unsolicited `100 Continue`: RFC 9110 §15.2
 * (https://www.rfc-editor.org/rfc/rfc9110#section-15.2) says to wait for the final response, but
 * undici destroys the connection on any 100 (https://github.com/nodejs/undici/issues/197,
 * wontfix), and tokentap never sends `Expect`. Only a response's first bytes are checked: undici
 * writes each request head as a string starting with the method (writeH1 in
 * lib/dispatcher/client-h1.js), which re-arms the check, while body bytes never do.
 */

const DECIDING_BYTES = 13
/** A larger 100 is not waited for: undici gets it, and fails. */
const MAX_INTERIM_BYTES = 16 * 1024
const HEAD_END = Buffer.from('\r\n\r\n')

/** Its length, 0 when `data` may still become one, -1 when it is not one. */
export function continueLength(data: Buffer): number {
  const n = Math.min(data.length, DECIDING_BYTES)
  for (let i = 0; i < n; i++) {
    const c = data[i]
    const ok =
      i < 7
        ? c === 'HTTP/1.'.charCodeAt(i)
        : i === 7
          ? c >= 0x30 && c <= 0x39
          : i === 8
            ? c === 0x20
            : i === 9
              ? c === 0x31
              : i < 12
                ? c === 0x30
                : c === 0x20 || c === 0x0d
    if (!ok) return -1
  }
  if (data.length < DECIDING_BYTES) return 0
  const end = data.indexOf(HEAD_END, DECIDING_BYTES - 1)
  if (end >= 0) return end + HEAD_END.length
  return data.length > MAX_INTERIM_BYTES ? -1 : 0
}

/** Makes `socket.read()` skip a 100 at the start of each response. */
export function skipUnsolicitedContinue(socket: Socket): void {
  const read = socket.read
  const write = socket.write
  let awaitingResponse = false
  let held: Buffer | undefined
  socket.write = function (this: Socket, ...args: Parameters<Socket['write']>): boolean {
    const data = args[0]
    if (typeof data === 'string' && data.charCodeAt(0) !== 0x0d) awaitingResponse = true
    return write.apply(this, args)
  } as Socket['write']
  socket.read = function (this: Socket, size?: number) {
    if (!awaitingResponse || size === 0) return read.call(this, size)
    let data = held
    held = undefined
    for (;;) {
      if (data === undefined || data.length === 0) {
        const chunk = read.call(this) as Buffer | null
        if (chunk === null) {
          // The connection ended in the middle of a 100: undici gets what there is.
          if (data !== undefined && data.length > 0 && this.readableEnded) {
            awaitingResponse = false
            return data
          }
          held = data
          return null
        }
        data = data === undefined || data.length === 0 ? chunk : Buffer.concat([data, chunk])
      }
      const skip = continueLength(data)
      if (skip < 0) {
        awaitingResponse = false
        return data
      }
      if (skip === 0) {
        const chunk = read.call(this) as Buffer | null
        if (chunk === null) {
          if (this.readableEnded) {
            awaitingResponse = false
            return data
          }
          held = data
          return null
        }
        data = Buffer.concat([data, chunk])
        continue
      }
      data = data.subarray(skip)
    }
  }
}
