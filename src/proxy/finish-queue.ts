import type { Exchange } from './exchange.ts'

/**
 * End-of-request work (measuring a whole stream, some twenty histogram observations, the SLO
 * verdict, the log line) runs after the I/O the event loop has waiting, never inside the socket
 * callback that closed the response: a stream ending must not delay other streams' chunks.
 * Exchanges that end in the same turn are finished together in one `setImmediate`.
 */
export class FinishQueue {
  #exchanges: Exchange[] = []
  #ends: number[] = []
  #gone: boolean[] = []
  #scheduled = false
  readonly #run = (): void => this.#drain()

  /** Finishes `ex` (as ended at `tEnd`) once the pending I/O has had its turn. */
  add(ex: Exchange, tEnd: number, clientGone: boolean): void {
    this.#exchanges.push(ex)
    this.#ends.push(tEnd)
    this.#gone.push(clientGone)
    if (!this.#scheduled) {
      this.#scheduled = true
      setImmediate(this.#run)
    }
  }

  #drain(): void {
    const exchanges = this.#exchanges
    const ends = this.#ends
    const gone = this.#gone
    this.#exchanges = []
    this.#ends = []
    this.#gone = []
    this.#scheduled = false
    for (let i = 0; i < exchanges.length; i++) exchanges[i].finish(ends[i], gone[i])
  }
}
