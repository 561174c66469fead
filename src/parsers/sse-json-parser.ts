import { DecodedParser } from './decoded-parser.ts'
import { SseDecoder } from './sse-decoder.ts'
import type { ParserContext } from './types.ts'

/** Base for SSE-of-JSON parsers: gives up quietly on the first bad event, since only measuring stops. */
export abstract class SseJsonParser extends DecodedParser {
  readonly #decoder: SseDecoder
  /** Events dispatched (sentinels included): none at all in a stream of junk lines means it was not SSE. */
  #events = 0
  readonly #onEvent = (event: string, data: string): void => this.#event(event, data)
  readonly #onOversize = (bytes: number): void => this.fail(`event of ${bytes} bytes is over the limit`)

  constructor(ctx: ParserContext) {
    super(ctx)
    this.#decoder = new SseDecoder(ctx.maxEventBytes)
  }

  protected decode(chunk: Uint8Array): void {
    this.#decoder.push(chunk, this.#onEvent, this.#onOversize)
  }

  protected flush(): void {
    this.#decoder.end()
    const junk = this.#decoder.unknownLines
    // A subclass may read some non-SSE lines itself (Gemini's raw error object): then they were no junk.
    if (this.#events === 0 && junk > 0 && this.summary.error === undefined)
      this.fail(`not an event stream: ${junk} lines that are no SSE field and no event`)
  }

  /** `data` that is not JSON but is expected (e.g. `[DONE]`) returns true from here. */
  protected isSentinel(data: string): boolean {
    return data === '[DONE]'
  }

  protected abstract onJson(event: string, value: unknown): void

  /** Handles an event from its text alone, skipping `JSON.parse`; must return false whenever unsure. */
  protected scan(_event: string, _data: string): boolean {
    return false
  }

  #event(event: string, data: string): void {
    this.#events++
    if (this.failed) return
    if (this.isSentinel(data)) return
    if (this.scan(event, data)) return
    let value: unknown
    try {
      value = JSON.parse(data)
    } catch {
      this.fail(`invalid JSON in event${event ? ` '${event}'` : ''}`)
      return
    }
    try {
      this.onJson(event, value)
    } catch (err) {
      // A shape no parser expected must never reach the byte path.
      this.fail(`unexpected event shape: ${(err as Error).message}`)
    }
  }
}
