/** A Buffer view of any Uint8Array (no copy), so decoders can use Buffer's native indexOf/toString. */
export function asBuffer(chunk: Uint8Array): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
}
