import type { FromSchema } from 'json-schema-to-ts'
import { PROVIDER_NAMES } from '../parsers/registry.ts'
import { KEEP_RULES } from '../timing/trace-sampling.ts'

/** The configuration: one JSON schema (defaults filled in at start-up) and the `Config` type derived from it, so no key is declared twice (docs/configuration.md). */

/** A route's `provider`: `auto` (detect from path and response) or a name from the parser registry. */
export const PROVIDERS = ['auto', ...PROVIDER_NAMES] as const

export const DEFAULT_BUCKETS = {
  /** 0.5 ms … 10 s: dense at 5–100 ms where healthy decoding lives, ≤ 25 % apart at 1–2.5 s so stall P99s read true. */
  itl: [
    0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.0225,
    0.025, 0.03, 0.035, 0.04, 0.045, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6,
    0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 7.5, 10,
  ],
  /** 5 ms … 120 s. */
  ttft: [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5,
    10, 15, 20, 30, 45, 60, 90, 120,
  ],
  /** 10 ms … 30 min. */
  e2e: [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600, 900, 1200,
    1800,
  ],
  /** Output tokens per second per request (1 a second apart from 5 to 10, where slow streams sit). */
  tps: [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12.5, 15, 20, 25, 30, 40, 50, 60, 75, 100, 125, 150, 200, 250, 300, 400, 500, 750,
    1000, 2000, 5000,
  ],
  /** A request's longest gap between content chunks: 10 ms … 2 min, the stall range. */
  max_gap: [
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30, 45,
    60, 90, 120,
  ],
} as const

const buckets = (defaults: readonly number[]) =>
  ({
    type: 'array',
    items: { type: 'number', exclusiveMinimum: 0 },
    minItems: 1,
    default: [...defaults],
  }) as const

/** One model's prices, per million tokens; a kind left out is unpriced (cache and reasoning fall back: docs/cost.md). */
const modelPrices = {
  input: { type: 'number', minimum: 0 },
  output: { type: 'number', minimum: 0 },
  cache_read: { type: 'number', minimum: 0 },
  cache_write: { type: 'number', minimum: 0 },
  // Anthropic's 1-hour cache writes, where the usage reports them apart.
  cache_write_1h: { type: 'number', minimum: 0 },
  reasoning: { type: 'number', minimum: 0 },
} as const

const pricing = {
  type: 'object',
  additionalProperties: false,
  properties: {
    // ISO 4217 code of every price (the `currency` label).
    currency: { type: 'string', pattern: '^[A-Z]{3}$', default: 'USD' },
    // LiteLLM's model_prices_and_context_window.json format (prices per token).
    file: { type: 'string', minLength: 1 },
    // The shipped, dated snapshot (config/prices.json) below the file: on unless false.
    snapshot: { type: 'boolean', default: true },
    // Model names (Azure deployments, own aliases) priced as another model.
    aliases: { type: 'object', default: {}, additionalProperties: { type: 'string', minLength: 1 } },
    // By model or provider/model; these win over the file and the snapshot.
    models: {
      type: 'object',
      default: {},
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        properties: {
          ...modelPrices,
          // Long-context prices: for a request whose input exceeds `above_input_tokens`, these replace the base ones.
          tiers: {
            type: 'array',
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['above_input_tokens'],
              properties: { above_input_tokens: { type: 'integer', minimum: 1 }, ...modelPrices },
            },
          },
        },
      },
    },
  },
} as const

/** File paths of a listener's certificate and key. */
const listenerTls = {
  type: 'object',
  additionalProperties: false,
  required: ['cert', 'key'],
  properties: { cert: { type: 'string', minLength: 1 }, key: { type: 'string', minLength: 1 } },
} as const

const upstreamTls = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  dependencies: { cert: ['key'], key: ['cert'] },
  properties: {
    ca: { type: 'string', minLength: 1 },
    cert: { type: 'string', minLength: 1 },
    key: { type: 'string', minLength: 1 },
    servername: { type: 'string', minLength: 1 },
  },
} as const

const simulator = {
  type: 'object',
  additionalProperties: false,
  properties: {
    // Time to first token, ms.
    ttft_ms: { type: 'number', minimum: 0, default: 250 },
    // Time between chunks, ms.
    itl_ms: { type: 'number', minimum: 0, default: 25 },
    // Uniform jitter added to each gap, ± ms.
    jitter_ms: { type: 'number', minimum: 0, default: 5 },
    // Output tokens when the request sets no max_tokens.
    tokens: { type: 'integer', minimum: 1, maximum: 1_000_000, default: 64 },
    // Tokens per chunk (≥ 1); a burst makes one chunk carry `burst_size`.
    tokens_per_chunk: { type: 'integer', minimum: 1, maximum: 1000, default: 1 },
    burst_every: { type: 'integer', minimum: 0, default: 16 },
    burst_size: { type: 'integer', minimum: 1, maximum: 1000, default: 4 },
    // A stall rare enough that P99 ITL stays on the ordinary gaps, long enough to pass metrics.stall_seconds.
    stall_probability: { type: 'number', minimum: 0, maximum: 1, default: 0.002 },
    stall_ms: { type: 'number', minimum: 0, default: 1500 },
    seed: { type: 'integer', default: 42 },
    model: { type: 'string', minLength: 1, default: 'tokentap-sim-1' },
    // Realtime sessions: audio per token, ms, and send speed against playback (below 1 a listener runs dry).
    audio_ms_per_token: { type: 'number', minimum: 0, default: 300 },
    audio_pace: { type: 'number', exclusiveMinimum: 0, default: 1.5 },
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
        // Loopback unless configured: containers set 0.0.0.0 explicitly (TOKENTAP_HOST).
        host: { type: 'string', minLength: 1, default: '127.0.0.1' },
        port: { type: 'integer', minimum: 0, maximum: 65535, default: 8080 },
        workers: { type: 'integer', minimum: 1, maximum: 256, default: 1 },
        drain_seconds: { type: 'number', minimum: 0, default: 30 },
        // After the drain, /metrics answers this long more, so the next scrape reads what the drain recorded.
        drain_linger_seconds: { type: 'number', minimum: 0, default: 15 },
        body_limit_bytes: { type: 'integer', minimum: 1, default: 64 * 1024 * 1024 },
        // Longest silence inside a request body (nginx's client_body_timeout): 408, or both sides ended; 0 = none.
        client_body_timeout_ms: { type: 'integer', minimum: 0, default: 60_000 },
        // A connection that has not sent a whole request head within this is closed (408 once it began one).
        request_head_timeout_ms: { type: 'integer', minimum: 1, default: 30_000 },
        // An idle keep-alive connection (between requests) is closed after this.
        keep_alive_timeout_ms: { type: 'integer', minimum: 1, default: 72_000 },
        tls: listenerTls,
      },
    },
    admin: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        // The admin listener serves metrics and request records: loopback unless configured (TOKENTAP_ADMIN_HOST).
        host: { type: 'string', minLength: 1, default: '127.0.0.1' },
        port: { type: 'integer', minimum: 0, maximum: 65535, default: 9464 },
        token: { type: 'string', minLength: 1 },
        tls: listenerTls,
      },
    },
    upstream: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        connect_timeout_ms: { type: 'integer', minimum: 1, default: 10_000 },
        // No response headers within this → 504.
        headers_timeout_ms: { type: 'integer', minimum: 1, default: 300_000 },
        // Longest silence between two reads of a response body; 0 = none.
        idle_timeout_ms: { type: 'integer', minimum: 0, default: 300_000 },
        // Whole request; 0 = none.
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
        // Distinct label sets in the whole exposition of the process group; later ones get model and tenant `other`
        // (docs/metrics.md, "Label caps and the series budget").
        max_label_sets: { type: 'integer', minimum: 1, maximum: 1_000_000, default: 300 },
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
        // A gap between content chunks longer than this is a stall (`llm_stream_stalls_total`).
        stall_seconds: { type: 'number', exclusiveMinimum: 0, default: 1 },
        // Attach request ids to TTFT, ITL and E2E buckets as OpenMetrics exemplars.
        exemplars: { type: 'boolean', default: false },
        // Add `length_band` (short < 64, medium < 512, long output tokens) to the ITL and TPOT histograms.
        length_band_label: { type: 'boolean', default: false },
        // Add `input_length_band` (lt_1k … ge_128k input tokens the provider reported, else unknown) to the TTFT and E2E histograms.
        input_length_band_label: { type: 'boolean', default: false },
        // Native histograms beside the classic ones, for scrapers that ask for protobuf (docs/native-histograms.md).
        native_histograms: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            enabled: { type: 'boolean', default: true },
            // Resolution: each power of two split into 2^schema buckets (3: within ~4.4 %).
            schema: { type: 'integer', minimum: -4, maximum: 8, default: 3 },
            // Values up to this magnitude count in the zero bucket.
            zero_threshold: { type: 'number', minimum: 0, default: 2 ** -128 },
            // Populated buckets a series keeps at most; past it the resolution is lowered.
            bucket_limit: { type: 'integer', minimum: 1, maximum: 10_000, default: 160 },
          },
        },
        // Opt-in `tenant` label (docs/metrics.md, "Tenants"): a header's value, or a keyed hash of the API key.
        tenant: {
          type: 'object',
          additionalProperties: false,
          properties: {
            header: { type: 'string', pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$" },
            from: { enum: ['header', 'api_key'], default: 'header' },
            // The HMAC key of `from: api_key`: at least 16 characters, so the hashes cannot be recomputed from guessed keys.
            secret: { type: 'string', minLength: 16 },
            // Distinct tenant values kept per process; later ones are `other` (`none` and `other` do not count).
            max_values: { type: 'integer', minimum: 1, maximum: 100_000, default: 1000 },
          },
        },
      },
    },
    otel: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        // OTLP/HTTP base URL (`/v1/metrics` is appended); absent = no export.
        endpoint: { type: 'string', pattern: '^https?://[^\\s/?#]+(/[^\\s?#]*)?$' },
        // http/protobuf (the default) or http/json; unset keys fall back to the standard OTEL_* variables.
        protocol: { enum: ['http/protobuf', 'http/json'] },
        interval_ms: { type: 'integer', minimum: 100 },
        timeout_ms: { type: 'integer', minimum: 100 },
        // Extra request headers (e.g. an API key of the collector's vendor).
        headers: { type: 'object', default: {}, additionalProperties: { type: 'string' } },
        // Histogram points: explicit bucket bounds, or base-2 exponential buckets (docs/otel.md).
        // Unset: OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION, else explicit.
        histograms: { enum: ['explicit', 'exponential'] },
        // Spans per request (docs/otel.md, "Traces"); absent = no traces.
        traces: {
          type: 'object',
          additionalProperties: false,
          properties: {
            // OTLP/HTTP (protobuf) traces URL; `/v1/traces` is appended unless present. Unset: otel.endpoint's, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT.
            endpoint: { type: 'string', pattern: '^https?://[^\\s/?#]+(/[^\\s?#]*)?$' },
            sample: {
              type: 'object',
              additionalProperties: false,
              default: {},
              properties: {
                // Share of the other traces kept when the caller sent no trace context.
                ratio: { type: 'number', minimum: 0, maximum: 1, default: 0.1 },
                // Requests kept whatever the ratio or the caller's flag: errors, stalls, SLO misses, E2E over slow_seconds.
                keep: { type: 'array', uniqueItems: true, items: { enum: [...KEEP_RULES] }, default: [...KEEP_RULES] },
                slow_seconds: { type: 'number', exclusiveMinimum: 0, default: 10 },
              },
            },
            // true: the upstream request's `traceparent` names tokentap's span (the provider call under it).
            propagate: { type: 'boolean', default: false },
          },
        },
      },
    },
    // Cost (docs/cost.md): prices per million tokens; absent = no cost metrics.
    pricing,
    // Daily or monthly spend budgets per tenant or route: alerting rules written by `tokentap budgets` (never enforced).
    budgets: {
      type: 'array',
      default: [],
      items: {
        type: 'object',
        additionalProperties: false,
        properties: {
          tenant: { type: 'string', minLength: 1 },
          route: { type: 'string', minLength: 1 },
          daily: { type: 'number', exclusiveMinimum: 0 },
          monthly: { type: 'number', exclusiveMinimum: 0 },
        },
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
    debug: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: { recent_requests: { type: 'integer', minimum: 0, maximum: 1_000_000, default: 10_000 } },
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
          proxy: { type: 'string', pattern: '^https?://[^\\s/?#]+/?$' },
          tls: upstreamTls,
          provider: { enum: [...PROVIDERS], default: 'auto' },
          simulator,
          // Adds `stream_options.include_usage` upstream when the client did not ask (OpenAI-compatible).
          inject_usage: { type: 'boolean', default: false },
          // Adds `x-tokentap-request-id` to the response head (off: the head stays the upstream's).
          echo_request_id: { type: 'boolean', default: false },
          // Adds a `Server-Timing` trailer (TTFT, own ITL P99, tokens) when the client sends `TE: trailers` on a chunked answer.
          server_timing: { type: 'boolean', default: false },
          // Latency SLO of this route (`llm_slo_requests_total`); absent = not judged.
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

/** Every level of `T` read-only: the validated config is frozen. */
type DeepReadonly<T> = T extends readonly (infer U)[]
  ? readonly DeepReadonly<U>[]
  : T extends object
    ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
    : T

/** The validated config: keys with a default are always present (ajv fills them in). */
export type Config = DeepReadonly<FromSchema<typeof configSchema>>
export type RouteConfig = Config['routes'][number]
export type SimulatorConfig = NonNullable<RouteConfig['simulator']>
export type OtelConfig = Config['otel']
/** OTLP/HTTP encodings (`OTEL_EXPORTER_OTLP_PROTOCOL` values). */
export type OtelProtocol = NonNullable<OtelConfig['protocol']>
export type TracesConfig = NonNullable<OtelConfig['traces']>
/** A listener's certificate and private key (PEM file paths): `server.tls`, `admin.tls`. */
export type ListenerTls = NonNullable<Config['server']['tls']>
/** TLS toward one route's upstream (PEM file paths): its CA, a client certificate for mTLS, the SNI name. */
export type UpstreamTls = NonNullable<RouteConfig['tls']>
