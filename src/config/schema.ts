/**
 * The configuration: JSON schema (validated once at start-up, defaults filled in) and its type.
 * The contract's YAML shape: ../../README.md#configuration.
 */

export const PROVIDERS = ['auto', 'openai', 'anthropic', 'gemini', 'ollama', 'tgi', 'bedrock'] as const
export type ProviderSetting = (typeof PROVIDERS)[number]

export const DEFAULT_BUCKETS = {
  /** 0.5 ms … 10 s, dense between 5 and 100 ms where healthy decoding lives. */
  itl: [0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.0225, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 10],
  /** 5 ms … 120 s. */
  ttft: [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120],
  /** 10 ms … 30 min. */
  e2e: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600, 900, 1200, 1800],
  /** Output tokens per second per request. */
  tps: [1, 2, 5, 10, 15, 20, 25, 30, 40, 50, 60, 75, 100, 125, 150, 200, 250, 300, 400, 500, 750, 1000, 2000, 5000],
  /** A request's longest gap between content chunks: 10 ms … 2 min, the stall range. */
  max_gap: [0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 30, 60, 120],
} as const

export interface SimulatorConfig {
  /** Time to first token, ms. */
  readonly ttft_ms: number
  /** Time between chunks, ms. */
  readonly itl_ms: number
  /** Uniform jitter added to each gap, ± ms. */
  readonly jitter_ms: number
  /** Output tokens when the request sets no max_tokens. */
  readonly tokens: number
  /** Tokens per chunk (≥ 1); a burst makes one chunk carry `burst_size`. */
  readonly tokens_per_chunk: number
  readonly burst_every: number
  readonly burst_size: number
  /** Probability that a gap is a stall of `stall_ms`. */
  readonly stall_probability: number
  readonly stall_ms: number
  readonly seed: number
  readonly model: string
}

export interface RouteConfig {
  readonly prefix: string
  readonly name?: string
  readonly upstream?: string
  readonly provider: ProviderSetting
  readonly simulator?: SimulatorConfig
  /** Adds `stream_options.include_usage` upstream when the client did not ask (OpenAI-compatible). */
  readonly inject_usage: boolean
  /** Latency SLO of this route (`llm_slo_requests_total`); absent = not judged. */
  readonly slo?: { readonly ttft_seconds?: number; readonly itl_p99_seconds?: number }
}

/** OTLP/HTTP encodings (`OTEL_EXPORTER_OTLP_PROTOCOL` values). */
export type OtelProtocol = 'http/protobuf' | 'http/json'

/** Unset keys fall back to the standard `OTEL_*` variables, then the SDK's defaults. */
export interface OtelConfig {
  /** OTLP/HTTP base URL (`/v1/metrics` is appended); absent = no export unless an `OTEL_EXPORTER_OTLP_*ENDPOINT` is set. */
  readonly endpoint?: string
  readonly protocol?: OtelProtocol
  readonly interval_ms?: number
  readonly timeout_ms?: number
  /** Extra request headers (e.g. an API key of the collector's vendor). */
  readonly headers: Readonly<Record<string, string>>
}

export interface Config {
  readonly server: {
    readonly host: string
    readonly port: number
    readonly workers: number
    readonly drain_seconds: number
    readonly body_limit_bytes: number
  }
  readonly admin: { readonly host: string; readonly port: number; readonly token?: string }
  readonly upstream: {
    readonly connect_timeout_ms: number
    /** No response headers within this → 504. */
    readonly headers_timeout_ms: number
    /** Longest silence between two reads of a response body; 0 = none. */
    readonly idle_timeout_ms: number
    /** Whole request; 0 = none. */
    readonly total_timeout_ms: number
    readonly keep_alive_timeout_ms: number
  }
  readonly limits: { readonly max_models_per_route: number; readonly max_event_bytes: number }
  readonly metrics: {
    readonly buckets: {
      readonly ttft: readonly number[]
      readonly itl: readonly number[]
      readonly inter_chunk: readonly number[]
      readonly tpot: readonly number[]
      readonly e2e: readonly number[]
      readonly tps: readonly number[]
      readonly max_gap: readonly number[]
    }
    readonly process_metrics: boolean
    /** A gap between content chunks longer than this is a stall (`llm_stream_stalls_total`). */
    readonly stall_seconds: number
    /** Attach request ids to TTFT, ITL and E2E buckets as OpenMetrics exemplars. */
    readonly exemplars: boolean
    /** Add `length_band` (short < 64, medium < 512, long output tokens) to the ITL and TPOT histograms. */
    readonly length_band_label: boolean
  }
  readonly otel: OtelConfig
  readonly tokenizer: {
    readonly default: 'o200k_base' | 'cl100k_base'
    readonly models: readonly { readonly pattern: string; readonly encoding: 'o200k_base' | 'cl100k_base' }[]
  }
  readonly log: { readonly level: string }
  readonly routes: readonly RouteConfig[]
}

const buckets = (defaults: readonly number[]) => ({
  type: 'array',
  items: { type: 'number', exclusiveMinimum: 0 },
  minItems: 1,
  default: [...defaults],
})

const simulator = {
  type: 'object',
  additionalProperties: false,
  properties: {
    ttft_ms: { type: 'number', minimum: 0, default: 250 },
    itl_ms: { type: 'number', minimum: 0, default: 25 },
    jitter_ms: { type: 'number', minimum: 0, default: 5 },
    tokens: { type: 'integer', minimum: 1, maximum: 1_000_000, default: 64 },
    tokens_per_chunk: { type: 'integer', minimum: 1, maximum: 1000, default: 1 },
    burst_every: { type: 'integer', minimum: 0, default: 16 },
    burst_size: { type: 'integer', minimum: 1, maximum: 1000, default: 4 },
    stall_probability: { type: 'number', minimum: 0, maximum: 1, default: 0.01 },
    stall_ms: { type: 'number', minimum: 0, default: 600 },
    seed: { type: 'integer', default: 42 },
    model: { type: 'string', minLength: 1, default: 'tokentap-sim-1' },
  },
} as const

export const configSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['routes'],
  properties: {
    server: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        host: { type: 'string', minLength: 1, default: '0.0.0.0' },
        port: { type: 'integer', minimum: 0, maximum: 65535, default: 8080 },
        workers: { type: 'integer', minimum: 1, maximum: 256, default: 1 },
        drain_seconds: { type: 'number', minimum: 0, default: 30 },
        body_limit_bytes: { type: 'integer', minimum: 1, default: 64 * 1024 * 1024 },
      },
    },
    admin: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        host: { type: 'string', minLength: 1, default: '0.0.0.0' },
        port: { type: 'integer', minimum: 0, maximum: 65535, default: 9464 },
        token: { type: 'string', minLength: 1 },
      },
    },
    upstream: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        connect_timeout_ms: { type: 'integer', minimum: 1, default: 10_000 },
        headers_timeout_ms: { type: 'integer', minimum: 1, default: 300_000 },
        idle_timeout_ms: { type: 'integer', minimum: 0, default: 300_000 },
        total_timeout_ms: { type: 'integer', minimum: 0, default: 0 },
        keep_alive_timeout_ms: { type: 'integer', minimum: 1, default: 30_000 },
      },
    },
    limits: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        max_models_per_route: { type: 'integer', minimum: 1, maximum: 100_000, default: 100 },
        max_event_bytes: { type: 'integer', minimum: 1024, default: 1024 * 1024 },
      },
    },
    metrics: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        buckets: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            ttft: buckets(DEFAULT_BUCKETS.ttft),
            itl: buckets(DEFAULT_BUCKETS.itl),
            inter_chunk: buckets(DEFAULT_BUCKETS.itl),
            tpot: buckets(DEFAULT_BUCKETS.itl),
            e2e: buckets(DEFAULT_BUCKETS.e2e),
            tps: buckets(DEFAULT_BUCKETS.tps),
            max_gap: buckets(DEFAULT_BUCKETS.max_gap),
          },
        },
        process_metrics: { type: 'boolean', default: true },
        stall_seconds: { type: 'number', exclusiveMinimum: 0, default: 1 },
        exemplars: { type: 'boolean', default: false },
        length_band_label: { type: 'boolean', default: false },
      },
    },
    otel: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        endpoint: { type: 'string', pattern: '^https?://[^\\s/?#]+(/[^\\s?#]*)?$' },
        protocol: { enum: ['http/protobuf', 'http/json'] },
        interval_ms: { type: 'integer', minimum: 100 },
        timeout_ms: { type: 'integer', minimum: 100 },
        headers: { type: 'object', default: {}, additionalProperties: { type: 'string' } },
      },
    },
    tokenizer: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        default: { enum: ['o200k_base', 'cl100k_base'], default: 'o200k_base' },
        models: {
          type: 'array',
          default: [],
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['pattern', 'encoding'],
            properties: {
              pattern: { type: 'string', minLength: 1, format: 'regex' },
              encoding: { enum: ['o200k_base', 'cl100k_base'] },
            },
          },
        },
      },
    },
    log: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: { level: { enum: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], default: 'info' } },
    },
    routes: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['prefix'],
        properties: {
          prefix: { type: 'string', pattern: '^/[^?#\\s]*$' },
          name: { type: 'string', minLength: 1, maxLength: 128 },
          upstream: { type: 'string', pattern: '^https?://[^\\s/?#]+(/[^\\s?#]*)?$' },
          provider: { enum: [...PROVIDERS], default: 'auto' },
          simulator,
          inject_usage: { type: 'boolean', default: false },
          slo: {
            type: 'object',
            additionalProperties: false,
            minProperties: 1,
            properties: {
              ttft_seconds: { type: 'number', exclusiveMinimum: 0 },
              itl_p99_seconds: { type: 'number', exclusiveMinimum: 0 },
            },
          },
        },
      },
    },
  },
} as const
