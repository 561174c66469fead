/** A Buffer view of any Uint8Array (no copy), so decoders can use Buffer's native indexOf/toString. */
export function asBuffer(chunk: Uint8Array): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
}

/**
 * A copy of `text` that holds its own characters. A slice of a string (an event's data is a slice
 * of the whole read the SSE decoder took as text) keeps the whole string alive while it is kept;
 * anything kept beyond the read is copied with this. Not for hot paths.
 */
export function ownCopy(text: string): string {
  return JSON.parse(JSON.stringify(text)) as string
}
