import type { Socket } from 'node:net'

/**
 * An upstream's unsolicited `100 Continue`, skipped before undici reads it.
 *
 * [RFC 9110 §15.2](https://www.rfc-editor.org/rfc/rfc9110#section-15.2): a client must parse a
 * 1xx response it did not expect and wait for the final one. undici instead destroys the
 * connection on any `100` (`onHeadersComplete` in lib/dispatcher/client-h1.js;
 * [nodejs/undici#197](https://github.com/nodejs/undici/issues/197), wontfix), which failed the
 * whole exchange with a 502. tokentap never sends `Expect` upstream, so every 100 is
 * unsolicited: its bytes are dropped from the connection, and undici parses the final response
 * (102 and 103 it already hands over, response-head.ts relays or drops them).
 *
 * Only the bytes that start a response are looked at: undici pipelines one request at a time,
 * so after it writes a request head the next bytes read are that request's response. Once they
 * are not a 100, reads pass straight through until the next request head is written. undici
 * writes a head as a string that starts with the method (lib/dispatcher/client-h1.js, writeH1
 * and the body writers); body bytes go as buffers, and chunked framing as strings that start
 * with CR, so a body written while the response streams back never re-arms the check.
 */

/** `HTTP/1.1 100 ` is 13 bytes: the shortest start that decides. */
const DECIDING_BYTES = 13
/** A 100 with more header bytes than this is not waited for: undici gets it, and fails as before. */
const MAX_INTERIM_BYTES = 16 * 1024
const HEAD_END = Buffer.from('\r\n\r\n')

/**
 * The length of the `100` response at the start of `data` (its status line and header block), 0
 * when `data` may still become one, -1 when it is not one.
 */
export function continueLength(data: Buffer): number {
  const n = Math.min(data.length, DECIDING_BYTES)
  for (let i = 0; i < n; i++) {
    const c = data[i]
    const ok = i < 7 ? c === 'HTTP/1.'.charCodeAt(i) : i === 7 ? c >= 0x30 && c <= 0x39 : i === 8 ? c === 0x20 : i === 9 ? c === 0x31 : i < 12 ? c === 0x30 : c === 0x20 || c === 0x0d
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
