import { NO_EVENTS } from './types.ts'
import type { ContentEvent, ParserContext, StreamParser, StreamSummary } from './types.ts'

/** Base of every decoder-driven parser: after the first failure nothing more is read, since only measuring stops. */
export abstract class DecodedParser implements StreamParser {
  protected readonly ctx: ParserContext
  protected readonly summary: StreamSummary = {}
  #out: ContentEvent[] | undefined
  #failed = false

  constructor(ctx: ParserContext) {
    this.ctx = ctx
  }

  push(chunk: Uint8Array): readonly ContentEvent[] {
    if (this.#failed) return NO_EVENTS
    this.#out = undefined
    this.decode(chunk)
    // Not kept until the next read: a stream waiting between chunks would hold the last read's events.
    const out = this.#out ?? NO_EVENTS
    this.#out = undefined
    return out
  }

  end(): StreamSummary {
    this.flush()
    return this.summary
  }

  /** Has the parser given up on this response? */
  protected get failed(): boolean {
    return this.#failed
  }

  /** Feeds one read to the decoder. */
  protected abstract decode(chunk: Uint8Array): void

  /** The response ended (or was cut): the decoder's last words. Runs even after a failure. */
  protected abstract flush(): void

  /** Record a content chunk completed by the current read. */
  protected emit(event: ContentEvent): void {
    if (this.#out === undefined) this.#out = [event]
    else this.#out.push(event)
  }

  /** A content chunk of `kind` whose text the request's tokenizer counts (at least 1 token). */
  protected emitText(kind: ContentEvent['kind'], text: string): void {
    this.emit({ kind, tokens: Math.max(1, this.ctx.countTokens(text)), exact: false })
  }

  /** Stop measuring this response; the reason goes to the log and `llm_parse_errors_total`. */
  protected fail(reason: string): void {
    if (this.#failed) return
    this.#failed = true
    this.summary.parseError = reason
  }
}
