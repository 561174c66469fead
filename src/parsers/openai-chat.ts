import { ownCopy } from './bytes.ts'
import { EventTemplate, shapeOf } from './json-template.ts'
import { SseJsonParser } from './sse-json-parser.ts'
import { ContentKind, usageOf } from './types.ts'
import { isObject, nonEmpty, readCount } from './json.ts'
import type { Json } from './json.ts'
import { readChatUsage, readLlamaCppTimes, readVllmMetrics } from './openai-usage.ts'

/**
 * OpenAI Chat Completions and legacy Completions streams (OpenAI, Azure, vLLM, SGLang, TGI, llama.cpp,
 * Ollama, DeepSeek, Mistral, Groq, OpenRouter): https://platform.openai.com/docs/api-reference/chat-streaming
 * Usage falls back to Groq's `x_groq.usage` and llama.cpp's `timings` (tools/server/README.md); reported
 * times from Groq's usage (https://console.groq.com/docs/api-reference) and llama.cpp's `timings`.
 */

/** Where a plain chunk's text is: the template's content hole. */
const CONTENT_PATH = ['choices', 0, 'delta', 'content'] as const
/** The same for legacy Completions (`text_completion`). */
const TEXT_PATH = ['choices', 0, 'text'] as const
/** Members onJson reads: never a template hole, so they must match exactly. */
const FIXED =
  /^(?:model|text|content|refusal|reasoning.*|error|usage|timings|x_groq|choices|delta|tool_calls|function_call|function|arguments)$/
const fixed = (key: string): boolean => FIXED.test(key)
/** Unused templates after which a stream learns only from every 256th miss (chunks that never repeat). */
const MAX_WASTED = 3

/** One SSE event's totals: every choice's new output is one content chunk. */
interface Piece {
  text: number
  reasoning: number
  tool: number
}

/** A plain chunk without content: its only effect in onJson is its model (a role-less finish chunk, `delta: {}`). */
const QUIET = null

/** The content path of a plain chunk (one choice, one string, nothing else onJson reads); QUIET for one without content. */
function plainPath(value: unknown): typeof CONTENT_PATH | typeof TEXT_PATH | typeof QUIET | undefined {
  if (
    !isObject(value) ||
    isObject(value.error) ||
    isObject(value.usage) ||
    isObject(value.timings) ||
    (isObject(value.x_groq) && isObject(value.x_groq.usage))
  )
    return undefined
  const choices = value.choices
  if (!Array.isArray(choices) || choices.length !== 1) return undefined
  const choice: unknown = choices[0]
  if (!isObject(choice)) return undefined
  const delta = choice.delta
  if (delta === undefined) return typeof choice.text === 'string' ? TEXT_PATH : undefined
  if (nonEmpty(choice.text) || !isObject(delta)) return undefined
  const other =
    nonEmpty(delta.refusal) ||
    nonEmpty(delta.reasoning_content) ||
    nonEmpty(delta.reasoning) ||
    Array.isArray(delta.tool_calls) ||
    isObject(delta.function_call)
  if (other) return undefined
  if (typeof delta.content === 'string') return CONTENT_PATH
  return Array.isArray(delta.content) ? undefined : QUIET
}

/** A template and what onJson learned from the event it was cut from, besides its text. */
interface Learned {
  readonly template: EventTemplate
  /** The event's `model` (a fixed member: the same in every event the template matches). */
  readonly model: string | undefined
}

/** Templates learned by any stream, most recent first: a new stream of a known shape need not learn its own. */
const known: Learned[] = []
const MAX_KNOWN = 16

/** Drops a template that broke, so no later stream tries it. */
function forget(learned: Learned): void {
  const i = known.indexOf(learned)
  if (i >= 0) known.splice(i, 1)
}

function remember(learned: Learned): void {
  if (known.length >= MAX_KNOWN) known.pop()
  known.unshift(learned)
}

export class OpenAIChatParser extends SseJsonParser {
  /** Cumulative completion tokens of the last chunk, while every chunk has carried usage (vLLM continuous usage). */
  #cumulative = 0
  #usageOnEveryChunk = true
  /** A top-level `usage` was seen: a server's own report (llama.cpp `timings`) no longer replaces it. */
  #topLevelUsage = false

  /** The stream's template, learned here or in another stream. */
  #learned: Learned | undefined
  /** The text of the event now taking the full parse, when it may teach a template. */
  #pending: string | undefined
  /** Events since the template last matched. */
  #misses = 0
  /** Whether the current template has read an event. */
  #matched = false
  /** Templates replaced before they read any event (chunks whose text never repeats). */
  #wasted = 0

  /** The hot path: an event matching a learned template is read without `JSON.parse`, with exactly its result. */
  protected override scan(event: string, data: string): boolean {
    if (event !== '') return false
    const own = this.#learned
    let text = own?.template.match(data)
    if (own?.template.broken) {
      forget(own)
      this.#learned = undefined
    }
    // Learning and recalling cost a scan each: a stream whose chunks never repeat stops trying.
    const trying = this.#wasted < MAX_WASTED || (this.#misses & 255) === 0
    if (text === undefined && trying) {
      for (let i = 0; i < known.length; i++) {
        const other = known[i]
        if (other === own) continue
        text = other.template.match(data)
        if (other.template.broken) forget(other)
        if (text !== undefined) {
          this.#adopt(other)
          break
        }
      }
    }
    if (text !== undefined) {
      this.#misses = 0
      this.#matched = true
      // Exactly what onJson does for a plain chunk.
      this.#usageOnEveryChunk = false
      const model = (this.#learned as Learned).model
      if (this.summary.model === undefined && model !== undefined) this.summary.model = model
      if (text.length > 0)
        this.emit({ kind: ContentKind.text, tokens: Math.max(1, this.ctx.countTokens(text)), exact: false })
      return true
    }
    if (trying) this.#pending = data
    this.#misses++
    return false
  }

  #adopt(learned: Learned): void {
    if (this.#learned !== undefined && !this.#matched) this.#wasted++
    this.#matched = false
    this.#learned = learned
  }

  #learn(data: string, path: typeof CONTENT_PATH | typeof TEXT_PATH | typeof QUIET, value: Json): void {
    // The template keeps pieces of the text: they must not keep the whole read alive.
    const shape = shapeOf(ownCopy(data), path ?? undefined, fixed)
    if (shape === undefined) return
    const template = EventTemplate.of(shape, data)
    if (template === undefined) return
    const learned: Learned = { template, model: nonEmpty(value.model) ? ownCopy(value.model) : undefined }
    this.#adopt(learned)
    remember(learned)
  }

  protected onJson(event: string, value: unknown): void {
    const pending = this.#pending
    this.#pending = undefined
    if (pending !== undefined && event === '') {
      const path = plainPath(value)
      if (path !== undefined) this.#learn(pending, path, value as Json)
    }
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

    if (usage !== undefined) {
      this.#topLevelUsage = true
      this.#usage(usage)
    } else {
      this.#ownUsage(value)
    }
    if (isObject(value.timings)) readLlamaCppTimes(value.timings, this.summary)
    if (isObject(value.metrics)) readVllmMetrics(value.metrics, this.summary)
    if (piece === undefined) return
    const kind = piece.text > 0 ? ContentKind.text : piece.tool > 0 ? ContentKind.tool : ContentKind.reasoning
    const estimated = piece.text + piece.tool + piece.reasoning
    const cumulative = usage !== undefined ? this.summary.usage?.output : undefined
    if (continuous && cumulative !== undefined && cumulative > this.#cumulative) {
      this.emit({ kind, tokens: cumulative - this.#cumulative, exact: true })
    } else {
      this.emit({ kind, tokens: Math.max(1, estimated), exact: false })
    }
    if (cumulative !== undefined) this.#cumulative = cumulative
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
      if (nonEmpty(part.text))
        piece = this.#add(piece, part.type === 'thinking' ? ContentKind.reasoning : ContentKind.text, part.text)
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
    // A count that is not one leaves the field as it was: not reported, the stream's own count stands.
    readChatUsage(usage, usageOf(this.summary), this.summary)
  }

  /** A chunk without `usage`: Groq's `x_groq.usage`, else llama.cpp's `timings`. A top-level `usage` seen before wins. */
  #ownUsage(value: Json): void {
    const groq = value.x_groq
    if (isObject(groq) && isObject(groq.usage)) {
      this.#usage(groq.usage)
      return
    }
    const timings = value.timings
    if (!isObject(timings) || this.#topLevelUsage) return
    const summary = this.summary
    const u = usageOf(summary)
    const output = readCount(timings.predicted_n, summary, 'predicted_n')
    if (output !== undefined) u.output = output
    // prompt_n counts the prompt tokens evaluated; those reused from the KV cache are cache_n (-1: none).
    const cached =
      typeof timings.cache_n === 'number' && timings.cache_n > 0
        ? (readCount(timings.cache_n, summary, 'cache_n') ?? 0)
        : 0
    const prompt = readCount(timings.prompt_n, summary, 'prompt_n')
    if (prompt !== undefined) u.input = readCount(prompt + cached, summary, 'prompt_n + cache_n')
    if (cached > 0) u.cacheRead = cached
  }
}
