import { constants, crc32, deflateRawSync } from 'node:zlib'

/**
 * A gzip stream (RFC 1952, one member) assembled from independently compressed pieces, the way
 * pigz compresses in parallel: each piece is deflated on its own with a sync flush, so its
 * blocks end byte-aligned, carry no final bit and refer back only inside the piece; such runs
 * concatenate into one valid deflate stream, closed by an empty final block and the trailer
 * (CRC-32 of all the raw bytes, their length). A piece that is reused between scrapes (a
 * histogram series' cached bytes) and was already sent unchanged once is compressed on its own
 * and its deflated bytes are kept beside it; everything else (series that just changed, counter
 * and gauge lines, process metrics) is compressed in groups as it comes, at the fastest level:
 * a series that changes at every scrape is not worth compressing alone each time.
 */

/** ID1 ID2, CM = deflate, no flags, MTIME 0, XFL 0, OS unknown. */
const HEADER = Buffer.from([0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff])
/** An empty fixed-Huffman block with the final bit set. */
const FINAL_BLOCK = Buffer.from([0x03, 0x00])
/** Raw bytes compressed in one go when not cached: well under a millisecond at level 1. */
const GROUP_BYTES = 32 * 1024

/** A histogram series is a few KiB: a 4 KiB window finds its repeats, small tables make the call cheap. */
const PIECE_OPTIONS = { level: 1, windowBits: 12, memLevel: 4, finishFlush: constants.Z_SYNC_FLUSH } as const
const GROUP_OPTIONS = { level: 1, finishFlush: constants.Z_SYNC_FLUSH } as const

/** Deflated bytes of reused pieces, by identity: dropped with the piece when its series is rendered anew. */
const cache = new WeakMap<Buffer, Buffer>()
/** Reused pieces sent once (in a group): compressed alone if they come again unchanged. */
const sentOnce = new WeakSet<Buffer>()

export class GzipBlocks {
  #crc = 0
  #size = 0
  #group: Buffer[] = []
  #groupBytes = 0
  #started = false

  /**
   * Takes the next raw piece; returns the compressed bytes ready to send (possibly none).
   * `reused`: the piece is kept between scrapes, so its deflated form is worth keeping too.
   */
  push(piece: Buffer, reused: boolean): Buffer[] {
    const out: Buffer[] = []
    if (!this.#started) {
      this.#started = true
      out.push(HEADER)
    }
    this.#crc = crc32(piece, this.#crc)
    this.#size += piece.length
    let deflated = reused ? cache.get(piece) : undefined
    if (deflated === undefined && reused && sentOnce.has(piece)) {
      deflated = deflateRawSync(piece, PIECE_OPTIONS)
      cache.set(piece, deflated)
    }
    if (deflated === undefined) {
      if (reused) sentOnce.add(piece)
      this.#group.push(piece)
      this.#groupBytes += piece.length
      if (this.#groupBytes >= GROUP_BYTES) out.push(this.#flushGroup())
      return out
    }
    if (this.#groupBytes > 0) out.push(this.#flushGroup())
    out.push(deflated)
    return out
  }

  /** The rest: pending group, final block, CRC-32 and length (mod 2^32), little-endian. */
  end(): Buffer[] {
    const out: Buffer[] = []
    if (!this.#started) out.push(HEADER)
    if (this.#groupBytes > 0) out.push(this.#flushGroup())
    const trailer = Buffer.allocUnsafe(8)
    trailer.writeUInt32LE(this.#crc >>> 0, 0)
    trailer.writeUInt32LE(this.#size % 2 ** 32, 4)
    out.push(FINAL_BLOCK, trailer)
    return out
  }

  #flushGroup(): Buffer {
    const raw = this.#group.length === 1 ? this.#group[0] : Buffer.concat(this.#group, this.#groupBytes)
    this.#group = []
    this.#groupBytes = 0
    return deflateRawSync(raw, GROUP_OPTIONS)
  }
}

/** Whether an `Accept-Encoding` header accepts gzip (RFC 9110 §12.5.3: listed, q not 0). */
export function acceptsGzip(header: string | undefined): boolean {
  if (header === undefined) return false
  for (const part of header.split(',')) {
    const [name, ...params] = part.split(';')
    const coding = name.trim().toLowerCase()
    if (coding !== 'gzip' && coding !== 'x-gzip') continue
    const q = params.map((p) => p.trim().toLowerCase()).find((p) => p.startsWith('q='))
    return q === undefined || Number(q.slice(2)) > 0
  }
  return false
}
