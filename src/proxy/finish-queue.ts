import type { Exchange } from './exchange.ts'

/**
 * End-of-request work runs after pending I/O, never inside the socket callback that closed the
 * response, so a stream ending does not delay other streams' chunks.
 */
export class FinishQueue {
  #exchanges: Exchange[] = []
  #ends: number[] = []
  #gone: boolean[] = []
  #scheduled = false
  readonly #run = (): void => this.#drain()

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
