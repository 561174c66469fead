import { AnthropicMessagesParser, summarizeAnthropicBody } from './anthropic-messages.ts'
import { BedrockParser, bedrockModelFromPath, summarizeBedrockBody } from './bedrock.ts'
import { CohereChatParser, summarizeCohereBody } from './cohere.ts'
import { createGeminiParser, geminiModelFromPath, isGeminiPath } from './gemini.ts'
import { JsonBodyParser } from './json-body-parser.ts'
import { OllamaParser, summarizeOllamaBody } from './ollama.ts'
import { summarizeOpenAIBody } from './openai-body.ts'
import { OpenAIChatParser } from './openai-chat.ts'
import { OpenAIResponsesParser, summarizeResponsesBody } from './openai-responses.ts'
import type { ReportedTimes } from './reported-times.ts'
import { summarizeTgiBody, TgiParser, tgiHeaderTimes } from './tgi.ts'
import type { ParserContext, StreamParser, StreamSummary } from './types.ts'

/**
 * The provider list, the one home of what is provider-specific (parser, model in the path, header
 * timings, OpenTelemetry names). Adding a provider: DEVELOPING.md, "Adding a provider".
 */

export interface ProviderSpec<Name extends string = string> {
  /** The `provider` label value and the config name. */
  readonly name: Name
  /** Does the request path (after the route prefix, no query) belong to this provider's API? */
  readonly ownsPath: (path: string) => boolean
  /** A parser for this response, or undefined when the content-type is not one it reads. */
  readonly parser: (ctx: ParserContext, mediaType: string) => StreamParser | undefined
  /** The model named by the request path, for APIs that put it there (Gemini, Bedrock, Azure deployments). */
  readonly modelFromPath?: (path: string) => string | undefined
  /** Timings the provider reports in its response headers (`header`: a response header by lower-case name). */
  readonly headerTimes?: (header: (lowerName: string) => string | undefined) => ReportedTimes | undefined
  /** Its `gen_ai.provider.name` when that differs from `name` (https://opentelemetry.io/docs/specs/semconv/registry/attributes/gen-ai/). */
  readonly genAiName?: string
}

/** `text/event-stream; charset=utf-8` → `text/event-stream`. */
function mediaTypeOf(contentType: string): string {
  const semi = contentType.indexOf(';')
  return (semi < 0 ? contentType : contentType.slice(0, semi)).trim().toLowerCase()
}

const isJson = (mediaType: string): boolean => mediaType === 'application/json' || mediaType.endsWith('+json')

/** A whole JSON answer parsed at the end with a provider's usage reader. */
function jsonBody(ctx: ParserContext, summarize: (value: unknown) => StreamSummary): StreamParser {
  return new JsonBodyParser(ctx.maxEventBytes, summarize)
}

/** The Responses API (`/v1/responses`, Azure `/openai/v1/responses`): labelled `openai` too. */
const isResponsesPath = (path: string): boolean => /\/responses$/.test(path)

export const openai: ProviderSpec<'openai'> = {
  name: 'openai',
  ownsPath: (path) => /\/(chat\/)?completions$/.test(path) || isResponsesPath(path),
  parser: (ctx, mediaType) => {
    if (isResponsesPath(ctx.path)) {
      if (mediaType === 'text/event-stream') return new OpenAIResponsesParser(ctx)
      return isJson(mediaType) ? jsonBody(ctx, summarizeResponsesBody) : undefined
    }
    if (mediaType === 'text/event-stream') return new OpenAIChatParser(ctx)
    if (isJson(mediaType)) return jsonBody(ctx, summarizeOpenAIBody)
    return undefined
  },
  // Azure OpenAI names the deployment in the path; its body often has no `model`.
  modelFromPath: (path) => /^(?:.*\/)?openai\/deployments\/([^/]+)\//.exec(path)?.[1],
}

const NDJSON = 'application/x-ndjson'
const EVENTSTREAM = 'application/vnd.amazon.eventstream'

/** Ollama native: NDJSON lines (streaming is its default) or one JSON answer. */
const ollama: ProviderSpec<'ollama'> = {
  name: 'ollama',
  ownsPath: (path) => /^\/api\/(chat|generate)$/.test(path),
  parser: (ctx, mediaType) => {
    if (mediaType === NDJSON) return new OllamaParser(ctx)
    if (isJson(mediaType)) return jsonBody(ctx, summarizeOllamaBody)
    return undefined
  },
}

/** Hugging Face TGI native: `/generate_stream` (SSE, one token an event) and `/generate`. */
const tgi: ProviderSpec<'tgi'> = {
  name: 'tgi',
  ownsPath: (path) => /(^|\/)generate(_stream)?$/.test(path),
  parser: (ctx, mediaType) => {
    if (mediaType === 'text/event-stream') return new TgiParser(ctx)
    if (isJson(mediaType)) return jsonBody(ctx, summarizeTgiBody)
    return undefined
  },
  headerTimes: tgiHeaderTimes,
}

/** AWS Bedrock Runtime: ConverseStream / InvokeModelWithResponseStream (eventstream), Converse / InvokeModel (JSON). */
const bedrock: ProviderSpec<'bedrock'> = {
  name: 'bedrock',
  ownsPath: (path) => bedrockModelFromPath(path) !== undefined,
  parser: (ctx, mediaType) => {
    if (mediaType === EVENTSTREAM) return new BedrockParser(ctx)
    if (isJson(mediaType)) return jsonBody(ctx, summarizeBedrockBody)
    return undefined
  },
  modelFromPath: bedrockModelFromPath,
  genAiName: 'aws.bedrock',
}

/** Vertex AI's Claude: `…/publishers/anthropic/models/{model}:streamRawPredict` (or `:rawPredict`). */
const VERTEX_ANTHROPIC = /\/publishers\/anthropic\/models\/([^/:]+):(?:stream)?[rR]awPredict$/

const anthropic: ProviderSpec<'anthropic'> = {
  name: 'anthropic',
  // `/v1/threads/{id}/messages` is OpenAI's Assistants API, not Anthropic's.
  ownsPath: (path) =>
    (/\/messages(\/count_tokens)?$/.test(path) && !path.includes('/threads/')) || VERTEX_ANTHROPIC.test(path),
  parser: (ctx, mediaType) => {
    if (ctx.path.endsWith('/count_tokens')) return undefined // a count, not a completion
    if (mediaType === 'text/event-stream') return new AnthropicMessagesParser(ctx)
    return isJson(mediaType) ? jsonBody(ctx, summarizeAnthropicBody) : undefined
  },
  modelFromPath: (path) => VERTEX_ANTHROPIC.exec(path)?.[1],
}

const gemini: ProviderSpec<'gemini'> = {
  name: 'gemini',
  ownsPath: isGeminiPath,
  parser: createGeminiParser,
  modelFromPath: geminiModelFromPath,
  genAiName: 'gcp.gemini',
}

/** Cohere Chat API v2: `/v2/chat` (SSE with `"stream": true`, else one JSON answer). */
const cohere: ProviderSpec<'cohere'> = {
  name: 'cohere',
  ownsPath: (path) => /(^|\/)v2\/chat$/.test(path),
  parser: (ctx, mediaType) => {
    if (mediaType === 'text/event-stream') return new CohereChatParser(ctx)
    return isJson(mediaType) ? jsonBody(ctx, summarizeCohereBody) : undefined
  },
}

/** Providers in detection order (most specific paths first). */
export const PROVIDERS = [gemini, anthropic, cohere, openai, ollama, tgi, bedrock] as const

/** A provider's name, as the `provider` label and the config's `routes[].provider` say it. */
export type ProviderName = (typeof PROVIDERS)[number]['name']

/** The names, sorted: the config's `provider` values besides `auto`. */
export const PROVIDER_NAMES: readonly ProviderName[] = PROVIDERS.map((p) => p.name).sort()

const byName = new Map<string, ProviderSpec>(PROVIDERS.map((p) => [p.name, p]))

export interface Selection {
  readonly provider: string
  readonly parser: StreamParser | undefined
  /** Timings the provider reported in the response headers, when it sends any there. */
  readonly reported?: ReportedTimes
}

/** The provider a request path points at (before the response is known), or undefined. */
export function providerForPath(setting: string, path: string): ProviderSpec | undefined {
  if (setting !== 'auto') return byName.get(setting)
  return PROVIDERS.find((p) => p.ownsPath(path))
}

/** Chooses provider and parser from the response; an unrecognised path with an SSE body is read as OpenAI-compatible. */
export function selectParser(
  setting: string,
  path: string,
  contentType: string,
  ctx: ParserContext,
  header?: (lowerName: string) => string | undefined,
): Selection {
  const mediaType = mediaTypeOf(contentType)
  const spec = providerForPath(setting, path)
  if (spec === undefined && setting !== 'auto') return { provider: setting, parser: undefined }
  if (spec !== undefined) {
    const parser = spec.parser(ctx, mediaType)
    const reported = header === undefined ? undefined : spec.headerTimes?.(header)
    return reported === undefined ? { provider: spec.name, parser } : { provider: spec.name, parser, reported }
  }
  if (mediaType === 'text/event-stream') return { provider: openai.name, parser: new OpenAIChatParser(ctx) }
  // Formats only one provider speaks tell it from the response alone.
  if (mediaType === NDJSON) return { provider: ollama.name, parser: new OllamaParser(ctx) }
  if (mediaType === EVENTSTREAM) return { provider: bedrock.name, parser: new BedrockParser(ctx) }
  return { provider: setting === 'auto' ? 'unknown' : setting, parser: undefined }
}

/** `gen_ai.provider.name` of a `provider` label value. */
export function genAiProviderName(provider: string): string {
  return byName.get(provider)?.genAiName ?? provider
}

/** `gen_ai.operation.name` by API path (https://opentelemetry.io/docs/specs/semconv/gen-ai/); undefined for non-GenAI requests. */
export function genAiOperation(method: string, path: string): string | undefined {
  if (method !== 'POST') return undefined
  if (/embed/i.test(path)) return 'embeddings'
  if (/generatecontent/i.test(path)) return 'generate_content'
  if (/chat|messages|responses|converse|invoke/i.test(path)) return 'chat'
  if (/complet|generate/i.test(path)) return 'text_completion'
  return undefined
}
