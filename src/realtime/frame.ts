import { randomBytes } from 'node:crypto'

/**
 * WebSocket framing (RFC 6455 §5.2, https://www.rfc-editor.org/rfc/rfc6455#section-5.2) for the few
 * frames the proxy and the simulator write themselves.
 */

export const Opcode = { continuation: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa } as const

/** The close codes the proxy itself sends (RFC 6455 §7.4.1). */
export const CloseCode = {
  normal: 1000,
  goingAway: 1001,
  protocolError: 1002,
  /** Never sent on the wire: the socket closed without a close frame. */
  abnormal: 1006,
  invalidPayload: 1007,
  tooBig: 1009,
  internalError: 1011,
} as const

/** FIN set, no RSV bits; client → server frames must be masked. */
export function encodeFrame(opcode: number, payload: Buffer, masked: boolean): Buffer {
  const n = payload.length
  const lengthBytes = n < 126 ? 0 : n < 65_536 ? 2 : 8
  const headLength = 2 + lengthBytes + (masked ? 4 : 0)
  const frame = Buffer.allocUnsafe(headLength + n)
  frame[0] = 0x80 | opcode
  frame[1] = (masked ? 0x80 : 0) | (lengthBytes === 0 ? n : lengthBytes === 2 ? 126 : 127)
  if (lengthBytes === 2) frame.writeUInt16BE(n, 2)
  else if (lengthBytes === 8) frame.writeBigUInt64BE(BigInt(n), 2)
  if (!masked) {
    payload.copy(frame, headLength)
    return frame
  }
  const key = randomBytes(4)
  key.copy(frame, 2 + lengthBytes)
  for (let i = 0; i < n; i++) frame[headLength + i] = payload[i] ^ key[i & 3]
  return frame
}

/** The reason is cut to fit the 125-byte control frame limit. */
export function closeFrame(code: number, reason: string, masked: boolean): Buffer {
  let text = Buffer.from(reason, 'utf8')
  if (text.length > 123) text = text.subarray(0, 123)
  const payload = Buffer.allocUnsafe(2 + text.length)
  payload.writeUInt16BE(code, 0)
  text.copy(payload, 2)
  return encodeFrame(Opcode.close, payload, masked)
}
