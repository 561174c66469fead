import { JsonArrayDecoder } from './json-array-decoder.ts'
import { JsonBodyParser } from './json-body-parser.ts'
import type { JsonArraySink } from './json-array-decoder.ts'
import { SseJsonParser } from './sse-json-parser.ts'
import { DecodedParser } from './decoded-parser.ts'
import { ContentKind, usageOf } from './types.ts'
import type { ContentEvent, ParserContext, StreamParser, StreamSummary } from './types.ts'
import { isObject, nonEmpty, readCount } from './json.ts'
import type { Json } from './json.ts'

/**
 * Google Gemini and Vertex AI: `?alt=sse` answers SSE, without it one JSON array streamed element by
 * element, `:generateContent` one object. `usageMetadata` is cumulative on every chunk, so while each
 * content chunk advances it, the difference is the chunk's exact token count.
 * https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent
 */

/** `…/models/{model}:{method}`: model and method, for Gemini and Vertex publisher paths. */
const MODEL_METHOD = /\/(?:models|tunedModels)\/([^/:]+):([A-Za-z]+)$/

/** Does the path name a Gemini model method (and not another Vertex publisher's model)? */
export function isGeminiPath(path: string): boolean {
  if (!MODEL_METHOD.test(path)) return false
  const publisher = /\/publishers\/([^/]+)\//.exec(path)
  return publisher === null || publisher[1] === 'google'
}

/** The model a Gemini or Vertex path names (`gemini-2.5-flash`), else undefined. */
export function geminiModelFromPath(path: string): string | undefined {
  const m = MODEL_METHOD.exec(path)
  if (m === null) return undefined
  try {
    return decodeURIComponent(m[1])
  } catch {
    return m[1]
  }
}

/** The method a Gemini path calls (`streamGenerateContent`), else undefined. */
function geminiMethod(path: string): string | undefined {
  return MODEL_METHOD.exec(path)?.[2]
}

/** Per-response state shared by both framings: reads one GenerateContentResponse at a time. */
class GeminiReader {
  readonly #ctx: ParserContext
  readonly #summary: StreamSummary
  /** Cumulative streamed output (candidates, + thoughts once streamed) of the last chunk that reported it. */
  #cumulative = 0
  /** Every content chunk so far advanced the cumulative count: per-chunk counts are exact. */
  #exact = true
  /** Thought parts were streamed, so thinking tokens are part of the chunks. */
  #thoughtsStreamed = false

  constructor(ctx: ParserContext, summary: StreamSummary) {
    this.#ctx = ctx
    this.#summary = summary
  }

  /** Reads one chunk; returns its content event, if it carries new output. */
  read(value: unknown): ContentEvent | undefined {
    if (!isObject(value)) return undefined
    const summary = this.#summary
    if (isObject(value.error)) {
      const e = value.error
      summary.error ??= String(e.status ?? e.code ?? e.message ?? 'error')
    }
    if (summary.model === undefined && nonEmpty(value.modelVersion)) summary.model = value.modelVersion
    const counts = isObject(value.usageMetadata) ? this.#usage(value.usageMetadata) : undefined

    let text = 0
    let reasoning = 0
    let tool = 0
    let any = false
    const candidates = value.candidates
    if (Array.isArray(candidates)) {
      for (const candidate of candidates) {
        if (!isObject(candidate) || !isObject(candidate.content)) continue
        const parts = candidate.content.parts
        if (!Array.isArray(parts)) continue
        for (const part of parts) {
          if (!isObject(part)) continue
          if (nonEmpty(part.text)) {
            any = true
            const n = this.#ctx.countTokens(part.text)
            if (part.thought === true) {
              reasoning += n
              this.#thoughtsStreamed = true
            } else text += n
          }
          if (isObject(part.functionCall)) {
            any = true
            tool += this.#ctx.countTokens(JSON.stringify(part.functionCall.args ?? {}))
          }
        }
      }
    }

    let cumulative: number | undefined
    if (counts !== undefined) {
      const thoughts = this.#thoughtsStreamed ? counts.thoughts : undefined
      if (counts.candidates !== undefined || thoughts !== undefined)
        cumulative = (counts.candidates ?? 0) + (thoughts ?? 0)
    }
    const previous = this.#cumulative
    if (cumulative !== undefined && cumulative > previous) this.#cumulative = cumulative
    if (!any) return undefined
    const kind =
      text > 0
        ? ContentKind.text
        : tool > 0
          ? ContentKind.tool
          : reasoning > 0
            ? ContentKind.reasoning
            : ContentKind.text
    if (this.#exact && cumulative !== undefined && cumulative > previous)
      return { kind, tokens: cumulative - previous, exact: true }
    this.#exact = false
    return { kind, tokens: Math.max(1, text + tool + reasoning), exact: false }
  }

  /** Records the usage; returns the cumulative counts it reports. */
  #usage(meta: Json): { candidates?: number; thoughts?: number } {
    const summary = this.#summary
    const usage = usageOf(summary)
    const input = readCount(meta.promptTokenCount, summary, 'promptTokenCount')
    if (input !== undefined) usage.input = input
    const candidates = readCount(meta.candidatesTokenCount, summary, 'candidatesTokenCount')
    const thoughts = readCount(meta.thoughtsTokenCount, summary, 'thoughtsTokenCount')
    if (candidates !== undefined || thoughts !== undefined) usage.output = (candidates ?? 0) + (thoughts ?? 0)
    if (thoughts !== undefined) usage.reasoning = thoughts
    // Part of promptTokenCount: the prompt tokens served from a context cache (explicit or implicit).
    const cached = readCount(meta.cachedContentTokenCount, summary, 'cachedContentTokenCount')
    if (cached !== undefined) usage.cacheRead = cached
    return { candidates, thoughts }
  }
}

/**
 * `?alt=sse`: Gemini aborts a stream by writing a raw `{"error": …}` object into the 200 body outside
 * SSE framing (the Gen AI SDKs look for it too), so a line starting with `{` is also read as JSON.
 */
export class GeminiSseParser extends SseJsonParser implements JsonArraySink {
  readonly #reader: GeminiReader
  /** Reading a raw JSON object found at a line start; undefined when not inside one. */
  #raw: JsonArrayDecoder | undefined
  /** The previous read ended a line (or nothing was read yet). */
  #lineStart = true

  constructor(ctx: ParserContext) {
    super(ctx)
    this.#reader = new GeminiReader(ctx, this.summary)
  }

  override push(chunk: Uint8Array): readonly ContentEvent[] {
    const events = super.push(chunk)
    const len = chunk.byteLength
    if (len === 0) return events
    const from = this.#raw !== undefined ? 0 : this.#lineStart && chunk[0] === OPEN_BRACE ? 0 : rawObjectStart(chunk)
    this.#lineStart = chunk[len - 1] === LF || chunk[len - 1] === CR
    if (from < 0) return events
    this.#raw ??= new JsonArrayDecoder(this.ctx.maxEventBytes)
    this.#raw.push(from === 0 ? chunk : chunk.subarray(from), this)
    return events
  }

  protected onJson(_event: string, value: unknown): void {
    const event = this.#reader.read(value)
    if (event !== undefined) this.emit(event)
  }

  /** A raw JSON object outside the SSE framing: an error (content is never sent that way). */
  element(text: string): void {
    this.#raw = undefined
    try {
      this.#reader.read(JSON.parse(text))
    } catch {
      // Not JSON after all: only a guess from a line start, never a reason to stop measuring.
    }
  }

  oversize(): void {
    this.#raw = undefined
  }

  invalid(): void {
    this.#raw = undefined
  }
}

const LF = 0x0a
const CR = 0x0d
const OPEN_BRACE = 0x7b

/** Offset of the first `{` that starts a line in this read, or -1. */
function rawObjectStart(chunk: Uint8Array): number {
  const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
  const lf = buf.indexOf('\n{')
  const cr = buf.indexOf('\r{')
  if (lf < 0 && cr < 0) return -1
  return (lf < 0 ? cr : cr < 0 ? lf : Math.min(lf, cr)) + 1
}

/** Default `alt=json`: one JSON array, each element a GenerateContentResponse as it is generated. */
export class GeminiArrayParser extends DecodedParser implements JsonArraySink {
  readonly #reader: GeminiReader
  readonly #decoder: JsonArrayDecoder

  constructor(ctx: ParserContext) {
    super(ctx)
    this.#reader = new GeminiReader(ctx, this.summary)
    this.#decoder = new JsonArrayDecoder(ctx.maxEventBytes)
  }

  protected decode(chunk: Uint8Array): void {
    this.#decoder.push(chunk, this)
  }

  protected flush(): void {
    this.#decoder.end()
  }

  element(text: string): void {
    if (this.failed) return
    let value: unknown
    try {
      value = JSON.parse(text)
    } catch {
      this.invalid('invalid JSON array element')
      return
    }
    let event: ContentEvent | undefined
    try {
      event = this.#reader.read(value)
    } catch (err) {
      this.invalid(`unexpected element shape: ${(err as Error).message}`)
      return
    }
    if (event !== undefined) this.emit(event)
  }

  oversize(bytes: number): void {
    this.invalid(`array element of ${bytes} bytes is over the limit`)
  }

  invalid(reason: string): void {
    this.fail(reason)
  }
}

/** Usage, model and error of a whole `:generateContent` answer (or a Google error body). */
export function summarizeGeminiBody(value: unknown): StreamSummary {
  const summary: StreamSummary = {}
  new GeminiReader({ countTokens: () => 0, path: '', contentType: '', maxEventBytes: 0 }, summary).read(value)
  return summary
}

/** The parser for a Gemini response, by framing (SSE, a streamed JSON array, one JSON object) and method. */
export function createGeminiParser(ctx: ParserContext, mediaType: string): StreamParser | undefined {
  if (mediaType === 'text/event-stream') return new GeminiSseParser(ctx)
  if (mediaType !== 'application/json') return undefined
  const method = geminiMethod(ctx.path)
  if (method === 'streamGenerateContent') return new GeminiArrayParser(ctx)
  if (method === 'generateContent') return new JsonBodyParser(ctx.maxEventBytes, summarizeGeminiBody)
  return undefined
}
