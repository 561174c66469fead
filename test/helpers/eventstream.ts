import zlib from 'node:zlib'

/** Builds AWS eventstream frames (string headers only), for tests that need frames no fixture has. */
export function frame(headers: Record<string, string>, payload: string | Buffer): Buffer {
  const hs: Buffer[] = []
  for (const [name, value] of Object.entries(headers)) {
    const n = Buffer.from(name, 'latin1')
    const v = Buffer.from(value, 'utf8')
    const h = Buffer.alloc(1 + n.length + 1 + 2 + v.length)
    h[0] = n.length
    n.copy(h, 1)
    h[1 + n.length] = 7
    h.writeUInt16BE(v.length, 2 + n.length)
    v.copy(h, 4 + n.length)
    hs.push(h)
  }
  return rawFrame(Buffer.concat(hs), typeof payload === 'string' ? Buffer.from(payload) : payload)
}

/** A frame around already encoded header bytes, with correct lengths and CRCs. */
export function rawFrame(headerBytes: Buffer, body: Buffer): Buffer {
  const total = 12 + headerBytes.length + body.length + 4
  const out = Buffer.alloc(total)
  out.writeUInt32BE(total, 0)
  out.writeUInt32BE(headerBytes.length, 4)
  out.writeUInt32BE(zlib.crc32(out.subarray(0, 8)), 8)
  headerBytes.copy(out, 12)
  body.copy(out, 12 + headerBytes.length)
  out.writeUInt32BE(zlib.crc32(out.subarray(0, total - 4)), total - 4)
  return out
}

/** An event frame as Bedrock sends it. */
export function eventFrame(eventType: string, payload: unknown): Buffer {
  return frame({ ':event-type': eventType, ':content-type': 'application/json', ':message-type': 'event' }, JSON.stringify(payload))
}

/** An InvokeModelWithResponseStream `chunk` frame wrapping a model-native JSON chunk. */
export function chunkFrame(inner: unknown): Buffer {
  return eventFrame('chunk', { bytes: Buffer.from(JSON.stringify(inner)).toString('base64'), p: 'abcd' })
}

/** A plain sequential walk over whole frames (independent of the decoder under test). */
export function walkFrames(bytes: Buffer): { headers: Record<string, string>; payload: Buffer }[] {
  const out: { headers: Record<string, string>; payload: Buffer }[] = []
  let pos = 0
  while (pos < bytes.length) {
    const total = bytes.readUInt32BE(pos)
    const hlen = bytes.readUInt32BE(pos + 4)
    const headers: Record<string, string> = {}
    let h = pos + 12
    while (h < pos + 12 + hlen) {
      const n = bytes[h]
      const name = bytes.toString('latin1', h + 1, h + 1 + n)
      const len = bytes.readUInt16BE(h + 2 + n)
      headers[name] = bytes.toString('utf8', h + 4 + n, h + 4 + n + len)
      h += 4 + n + len
    }
    out.push({ headers, payload: bytes.subarray(pos + 12 + hlen, pos + total - 4) })
    pos += total
  }
  return out
}
