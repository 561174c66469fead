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

/** Makes ids unique within the process: `tt-<pid>-<counter>`, base 36. */
export class RequestIds {
  readonly #prefix = `tt-${process.pid.toString(36)}-`
  #next = 0

  of(headers: IncomingHttpHeaders): RequestId {
    const given = headers['x-request-id']
    if (typeof given === 'string' && given.length > 0 && given.length <= MAX_REQUEST_ID_LENGTH) return { id: given, generated: false }
    return { id: this.#prefix + (this.#next++).toString(36), generated: true }
  }
}
