import { randomUUID } from 'node:crypto'
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

/**
 * Makes up ids that cannot be walked: `tt-` and a random UUID (122 random bits), so one id
 * says nothing of the ids of other requests (`/debug/requests/{id}` answers by id).
 */
export class RequestIds {
  of(headers: IncomingHttpHeaders): RequestId {
    const given = headers['x-request-id']
    if (typeof given === 'string' && given.length > 0 && given.length <= MAX_REQUEST_ID_LENGTH) return { id: given, generated: false }
    return { id: `tt-${randomUUID()}`, generated: true }
  }
}
