import { randomFillSync } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'

/**
 * The request id a request is known by (log line, exemplars, /debug views): the client's
 * `x-request-id` when it sent a usable one, else one made up here (which the upstream's own
 * `x-request-id` may replace, see Exchange.responseStarted).
 */

/** Longer ids are not taken from a client or an upstream (they would bloat every log line and exemplar). */
export const MAX_REQUEST_ID_LENGTH = 200

export interface RequestId {
  readonly id: string
  /** The proxy made it up (so the upstream's id may replace it). */
  readonly generated: boolean
}

/** Random bytes in an id: 64 bits, so one id says nothing of another request's. */
const ID_BYTES = 8
/** Ids drawn from one system call: a random fill per request would cost more than the id is worth. */
const POOL_IDS = 512

/**
 * Makes up ids that cannot be walked: `tt-<pid, base 36>-<64 random bits, hex>`. The pid says
 * which process (or cluster worker) served the request; the random part means no id leads to
 * another request's (`/debug/requests/{id}` answers by id).
 */
export class RequestIds {
  readonly #prefix = `tt-${process.pid.toString(36)}-`
  readonly #pool = Buffer.alloc(ID_BYTES * POOL_IDS)
  #at = this.#pool.length

  of(headers: IncomingHttpHeaders): RequestId {
    const given = headers['x-request-id']
    if (typeof given === 'string' && given.length > 0 && given.length <= MAX_REQUEST_ID_LENGTH) return { id: given, generated: false }
    if (this.#at === this.#pool.length) {
      randomFillSync(this.#pool)
      this.#at = 0
    }
    const id = this.#prefix + this.#pool.toString('hex', this.#at, this.#at + ID_BYTES)
    this.#at += ID_BYTES
    return { id, generated: true }
  }
}
