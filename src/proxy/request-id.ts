import { randomFillSync } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'

/** The client's `x-request-id` when usable, else made up here (then the upstream's may replace it). */

/** They would bloat every log line and exemplar. */
export const MAX_REQUEST_ID_LENGTH = 200

export interface RequestId {
  readonly id: string
  readonly generated: boolean
}

/** 64 bits, so one id says nothing of another request's. */
const ID_BYTES = 8
/** A random fill per request would cost more than the id is worth. */
const POOL_IDS = 512

/** `tt-<pid, base 36>-<64 random bits, hex>`: not walkable, as `/debug/requests/{id}` answers by id. */
export class RequestIds {
  readonly #prefix = `tt-${process.pid.toString(36)}-`
  readonly #pool = Buffer.alloc(ID_BYTES * POOL_IDS)
  #at = this.#pool.length

  of(headers: IncomingHttpHeaders): RequestId {
    const given = headers['x-request-id']
    if (typeof given === 'string' && given.length > 0 && given.length <= MAX_REQUEST_ID_LENGTH)
      return { id: given, generated: false }
    if (this.#at === this.#pool.length) {
      randomFillSync(this.#pool)
      this.#at = 0
    }
    const id = this.#prefix + this.#pool.toString('hex', this.#at, this.#at + ID_BYTES)
    this.#at += ID_BYTES
    return { id, generated: true }
  }
}
