import { SseJsonParser } from './sse-json-parser.ts'
import { ContentKind } from './types.ts'
import type { ParserContext, StreamParser } from './types.ts'

/**
 * OpenAI Chat Completions (`chat.completion.chunk`) and legacy Completions (`text_completion`)
 * streams, as OpenAI, Azure, vLLM, SGLang, TGI's /v1, llama.cpp, Ollama's /v1, DeepSeek,
 * Mistral, Groq and OpenRouter send them.
 *
 * Content: `delta.content` (a string, or Mistral's array of text/thinking parts),
 * `delta.refusal`, `delta.reasoning_content` / `delta.reasoning`, tool-call argument fragments
 * (`delta.tool_calls[].function.arguments`, legacy `delta.function_call.arguments`), and the
 * legacy `choices[].text`. Role-only chunks, empty deltas, finish chunks, usage-only chunks
 * (`choices: []`), Azure's prompt-filter chunks and `[DONE]` are not content.
 * https://platform.openai.com/docs/api-reference/chat-streaming
 */

type Json = Record<string, unknown>

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * Keys that need the full parse when present: usage, errors, and every content field other than
 * `delta.content` (`:null`, as OpenAI sends `"usage":null` on every chunk, reads as absent).
 * Matched with their quotes: a quote inside a JSON string is escaped, so a match is a key or a
 * whole string value (a value only costs a full parse, never a wrong count).
 */
const NEEDS_PARSE = /"(?:usage|error|text|refusal|tool_calls|function_call|reasoning[^"]*)"(?!:null)|"content"/g

/** Whether `data` has a NEEDS_PARSE match other than the one ending at `allowedEnd` (the delta's own content key). */
function needsParse(data: string, allowedEnd: number): boolean {
  NEEDS_PARSE.lastIndex = 0
  while (NEEDS_PARSE.test(data)) if (NEEDS_PARSE.lastIndex !== allowedEnd) return true
  return false
}
const DELTA = '"delta":{'
const CONTENT = '"content":'
const ROLE = '"role":"assistant",'
const QUOTE = 34
const BACKSLASH = 92
const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.length > 0

/** Running totals for one SSE event: every choice's new output is one content chunk. */
interface Piece {
  text: number
  reasoning: number
  tool: number
}

/**
 * Whether `{}` and `[]` balance in `data`, skipping the string that starts at `skipFrom`'s
 * content value (the generated text, which may hold any character). Other strings in a chunk
 * (ids, model names, padding) hold none in practice; when they do, the event simply takes the
 * full parse.
 */
function balanced(data: string, skipFrom: number): boolean {
  let depth = 0
  let skipStart = -1
  let skipEnd = -1
  if (skipFrom >= 0) {
    skipStart = data.indexOf('"', skipFrom + CONTENT.length - 1)
    skipEnd = skipStart
    for (;;) {
      skipEnd = data.indexOf('"', skipEnd + 1)
      if (skipEnd < 0) return false
      let k = skipEnd - 1
      while (data.charCodeAt(k) === BACKSLASH) k--
      if ((skipEnd - 1 - k) % 2 === 0) break
    }
  }
  for (let i = 0; i < data.length; i++) {
    if (i === skipStart) {
      i = skipEnd
      continue
    }
    const ch = data.charCodeAt(i)
    if (ch === 123 || ch === 91) depth++
    else if (ch === 125 || ch === 93) {
      if (--depth < 0) return false
    }
  }
  return depth === 0
}

export class OpenAIChatParser extends SseJsonParser {
  /** Cumulative completion tokens of the last chunk, while every chunk has carried usage (vLLM continuous usage). */
  #cumulative = 0
  #usageOnEveryChunk = true

  /**
   * The fast path (most events of a chat stream): one choice whose delta is `{"content":"…"}`
   * (after an optional `"role":"assistant",`) or empty, and no usage, error or other content
   * field anywhere: the text is read without `JSON.parse`, with exactly the full parse's result.
   * Anything else falls back to the full parse. The first event always takes the full parse
   * (it names the model).
   */
  protected override scan(event: string, data: string): boolean {
    if (event !== '' || this.summary.model === undefined) return false
    const last = data.length - 1
    if (data.charCodeAt(0) !== 123 /* { */ || data.charCodeAt(last) !== 125 /* } */) return false
    const d = data.indexOf(DELTA)
    if (d < 0 || data.indexOf('"delta"') !== d || data.indexOf('"delta"', d + DELTA.length) >= 0) return false
    let c = d + DELTA.length
    if (data.startsWith(ROLE, c)) c += ROLE.length
    let text = ''
    if (data.startsWith(CONTENT, c)) {
      const v = c + CONTENT.length
      if (data.charCodeAt(v) !== QUOTE) return false
      // The closing quote: the first one not escaped (preceded by an even run of backslashes).
      let end = v
      for (;;) {
        end = data.indexOf('"', end + 1)
        if (end < 0) return false
        let k = end - 1
        while (data.charCodeAt(k) === BACKSLASH) k--
        if ((end - 1 - k) % 2 === 0) break
      }
      // Nothing but this content key may need the full parse (a match inside the text itself
      // only sends the event to the full parse).
      if (needsParse(data, c + CONTENT.length - 1)) return false
      text = data.slice(v + 1, end)
      if (text.indexOf('\\') >= 0) {
        // Escapes (\n, \", \uXXXX): JSON decodes the string alone.
        try {
          text = JSON.parse(data.slice(v, end + 1)) as string
        } catch {
          return false
        }
      }
    } else if (c !== d + DELTA.length || needsParse(data, -1)) {
      return false
    }
    // A truncated or spliced event must reach JSON.parse (and fail there): the braces and
    // brackets outside the text must balance. Any imbalance sends the event to the full parse.
    if (!balanced(data, text.length > 0 ? c : -1)) return false
    // What onJson does for such an event: no usage on this chunk, one text piece if non-empty.
    this.#usageOnEveryChunk = false
    if (text.length > 0) this.emit({ kind: ContentKind.text, tokens: Math.max(1, this.ctx.countTokens(text)), exact: false })
    return true
  }

  protected onJson(event: string, value: unknown): void {
    if (!isObject(value)) return
    if (event === 'error' || isObject(value.error)) {
      const error = isObject(value.error) ? value.error : value
      this.summary.error = String(error.code ?? error.type ?? error.message ?? 'error')
    }
    if (this.summary.model === undefined && nonEmpty(value.model)) this.summary.model = value.model

    const usage = isObject(value.usage) ? value.usage : undefined
    // Usage on every chunk so far (vLLM `continuous_usage_stats`) makes each running count exact,
    // the first chunk's too; usage that only arrives at the end is not per-chunk.
    if (usage === undefined) this.#usageOnEveryChunk = false
    const continuous = usage !== undefined && this.#usageOnEveryChunk

    let piece: Piece | undefined
    const choices = value.choices
    if (Array.isArray(choices)) {
      for (const choice of choices) {
        if (!isObject(choice)) continue
        if (nonEmpty(choice.text)) piece = this.#add(piece, ContentKind.text, choice.text)
        const delta = choice.delta
        if (isObject(delta)) piece = this.#delta(piece, delta)
      }
    }

    if (usage !== undefined) this.#usage(usage)
    if (piece === undefined) return
    const kind = piece.text > 0 ? ContentKind.text : piece.tool > 0 ? ContentKind.tool : ContentKind.reasoning
    const estimated = piece.text + piece.tool + piece.reasoning
    const cumulative = usage !== undefined ? usage.completion_tokens : undefined
    if (continuous && typeof cumulative === 'number' && cumulative > this.#cumulative) {
      this.emit({ kind, tokens: cumulative - this.#cumulative, exact: true })
    } else {
      this.emit({ kind, tokens: Math.max(1, estimated), exact: false })
    }
    if (typeof cumulative === 'number') this.#cumulative = cumulative
  }

  #delta(piece: Piece | undefined, delta: Json): Piece | undefined {
    const content = delta.content
    if (nonEmpty(content)) piece = this.#add(piece, ContentKind.text, content)
    else if (Array.isArray(content)) piece = this.#contentParts(piece, content)
    if (nonEmpty(delta.refusal)) piece = this.#add(piece, ContentKind.text, delta.refusal)
    if (nonEmpty(delta.reasoning_content)) piece = this.#add(piece, ContentKind.reasoning, delta.reasoning_content)
    else if (nonEmpty(delta.reasoning)) piece = this.#add(piece, ContentKind.reasoning, delta.reasoning)
    const toolCalls = delta.tool_calls
    if (Array.isArray(toolCalls)) {
      for (const call of toolCalls) {
        if (isObject(call) && isObject(call.function) && nonEmpty(call.function.arguments)) {
          piece = this.#add(piece, ContentKind.tool, call.function.arguments)
        }
      }
    }
    const functionCall = delta.function_call
    if (isObject(functionCall) && nonEmpty(functionCall.arguments)) {
      piece = this.#add(piece, ContentKind.tool, functionCall.arguments)
    }
    return piece
  }

  /** Mistral's `content` array: `{type:"text",text}` and `{type:"thinking",thinking:[{type:"text",text}]}`. */
  #contentParts(piece: Piece | undefined, parts: unknown[]): Piece | undefined {
    for (const part of parts) {
      if (!isObject(part)) continue
      if (nonEmpty(part.text)) piece = this.#add(piece, part.type === 'thinking' ? ContentKind.reasoning : ContentKind.text, part.text)
      if (Array.isArray(part.thinking)) {
        for (const inner of part.thinking) {
          if (isObject(inner) && nonEmpty(inner.text)) piece = this.#add(piece, ContentKind.reasoning, inner.text)
        }
      } else if (nonEmpty(part.thinking)) {
        piece = this.#add(piece, ContentKind.reasoning, part.thinking)
      }
    }
    return piece
  }

  #add(piece: Piece | undefined, kind: ContentKind, text: string): Piece {
    const p = piece ?? { text: 0, reasoning: 0, tool: 0 }
    p[kind] += this.ctx.countTokens(text)
    return p
  }

  #usage(usage: Json): void {
    const summary = this.summary
    const u = (summary.usage ??= {})
    if (typeof usage.completion_tokens === 'number') u.output = usage.completion_tokens
    if (typeof usage.prompt_tokens === 'number') u.input = usage.prompt_tokens
    const details = usage.completion_tokens_details
    if (isObject(details) && typeof details.reasoning_tokens === 'number') u.reasoning = details.reasoning_tokens
  }
}

export const createOpenAIChatParser = (ctx: ParserContext): StreamParser => new OpenAIChatParser(ctx)
