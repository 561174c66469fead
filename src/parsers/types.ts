import type { ReportedTimes } from './reported-times.ts'

/** The seam between the byte path and the measuring path: one parser per provider API and request. */

/** What kind of newly generated output a content chunk carries. */
export const ContentKind = {
  text: 'text',
  reasoning: 'reasoning',
  tool: 'tool',
} as const
export type ContentKind = (typeof ContentKind)[keyof typeof ContentKind]

/**
 * One content chunk: `tokens` is the provider's own count when it gives one (`exact`), else the
 * tokenizer's; with several kinds in one event, `kind` is the most visible (text, tool, reasoning).
 */
export interface ContentEvent {
  readonly kind: ContentKind
  readonly tokens: number
  readonly exact: boolean
}

/** Token usage as the provider reported it; every field optional. */
export interface Usage {
  /** Output (completion) tokens, reasoning included where the provider includes it. */
  output?: number
  input?: number
  /** Reasoning tokens inside `output`, where the provider breaks them out. */
  reasoning?: number
  /** Input tokens read from the provider's prompt cache (part of `input`). */
  cacheRead?: number
  /** Input tokens written to the provider's prompt cache (part of `input`; Anthropic, Bedrock). */
  cacheWrite?: number
  /** Of `cacheWrite`, the tokens written for an hour (Anthropic's `cache_creation.ephemeral_1h_input_tokens`), billed at a higher rate. */
  cacheWrite1h?: number
}

/** What the parser learned about the whole response once it ended. */
export interface StreamSummary {
  usage?: Usage
  /** Model the response names (`model` field), when any. */
  model?: string
  /** A provider error arrived inside the stream (an error event or object). */
  error?: string
  /** The parser gave up on this response (bad input); bytes still passed through. */
  parseError?: string
  /** Speculative decoding as the upstream reported it (vLLM's `metrics.speculative_decoding`): draft tokens proposed and accepted. */
  speculative?: { readonly drafted: number; readonly accepted: number }
  /** Provider-specific figures kept for the log line (e.g. Ollama's eval rate). */
  extra?: Record<string, number | string>
  /** The upstream's own timings by phase, in seconds, as it reported them (reported-times.ts). */
  reported?: ReportedTimes
}

/** The summary's usage, created empty the first time a parser records a field of it. */
export function usageOf(summary: StreamSummary): Usage {
  if (summary.usage === undefined) summary.usage = {}
  return summary.usage
}

export interface StreamParser {
  /** Feed raw (decoded) response bytes; returns the content events this read completed. Never throws on bad input. */
  push(chunk: Uint8Array): readonly ContentEvent[]
  /** The response ended (or was cut); flush and summarise. */
  end(): StreamSummary
}

/** Counts the tokens of a piece of generated text (the tokenizer for the request's model). */
type TokenCounter = (text: string) => number

/** Facts about the request/response a parser factory may look at. */
export interface ParserContext {
  readonly countTokens: TokenCounter
  /** Path after the route prefix, without the query string. */
  readonly path: string
  readonly contentType: string
  /** Largest SSE event / NDJSON line / frame kept in memory, in bytes. */
  readonly maxEventBytes: number
}

/** Shared empty result: most reads complete no content event, so allocate nothing for them. */
export const NO_EVENTS: readonly ContentEvent[] = Object.freeze([])
