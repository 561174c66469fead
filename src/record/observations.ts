import { LabelSetBudget } from './label-fold.ts'
import { LabelLimiter, OTHER } from './label-limiter.ts'
import { Outcome, TokenSource } from '../timing/measurement.ts'
import type { Measurement } from '../timing/measurement.ts'
import type { SloVerdict } from '../timing/slo.ts'
import type { ReportedTimes } from '../parsers/reported-times.ts'
import { genAiOperation } from '../parsers/registry.ts'
import type { TraceIds, TraceStart } from '../proxy/trace-context.ts'
import { keepTrace } from '../timing/trace-sampling.ts'
import type { TraceSampling } from '../timing/trace-sampling.ts'
import { errorTypeOf } from '../proxy/upstream-errors.ts'
import type { ErrorType } from '../proxy/upstream-errors.ts'
import { requestCost } from '../cost/cost.ts'
import type { RequestCost } from '../cost/cost.ts'
import type { PriceTable } from '../cost/price-table.ts'
import { isSuccess } from '../http-status.ts'

/** A streamed request whose bytes waited longer than this (seconds) for the client's socket had a slow client. */
export const SLOW_CLIENT_SECONDS = 0.1

/**
 * The recording policy, in one place: a finished request's `Measurement` (what happened) and
 * identity in, its `Observations` (what every sink records) out. Every rule about what gets
 * recorded lives here and nowhere else:
 * - the ok-only gates: TPOT, per-user TPS and OpenTelemetry's server TTFT only for outcome `ok`;
 * - the output-token rule: a count is recorded when the provider reported one or N ≥ 1;
 * - the length band of the output, the input-length band of the prompt;
 * - the error type of a failed or cancelled request (OpenTelemetry's, and the `error_type` class
 *   from proxy/upstream-errors.ts);
 * - the bounded labels: at most `limits.max_models_per_route` models per route, then `other`;
 *   at most `limits.max_label_sets` label sets, then model and tenant `other` (the overflow set);
 * - which requests' spans are exported (trace-sampling.ts).
 * The sinks (Prometheus families, OTLP, the live page, the log line) only map Observations onto
 * their own shapes, with no conditions of their own. Adding a metric is one field here and one
 * line per sink; adding a label is one entry in `SERIES_LABELS` and its value in `#set` (`tenant`, optional, is
 * appended there).
 * Pure but for the label bound's memory of the models it admitted.
 */

/** The label names of every llm_ series, in the order of `Observations.labelValues`. */
export const SERIES_LABELS = ['provider', 'model', 'route'] as const

/** The optional label every llm_ series carries after SERIES_LABELS with `metrics.tenant` on. */
const TENANT_LABEL = 'tenant'

export interface SeriesLabels {
  readonly provider: string
  readonly model: string
  readonly route: string
  /** With `metrics.tenant` on: the request's tenant (record/tenant.ts). */
  readonly tenant?: string
}

/** Output-length bands (`length_band`): short < 64, medium < 512, long ≥ 512 output tokens. */
export const LENGTH_BANDS = [
  { name: 'short', below: 64 },
  { name: 'medium', below: 512 },
  { name: 'long', below: Number.POSITIVE_INFINITY },
] as const

/** The index in LENGTH_BANDS of a request with this many output tokens. */
export function lengthBandOf(outputTokens: number): number {
  return outputTokens < LENGTH_BANDS[0].below ? 0 : outputTokens < LENGTH_BANDS[1].below ? 1 : 2
}

/**
 * Input-length bands (`input_length_band`, TTFT and E2E): by the input tokens the provider
 * reported, in binary thousands as context windows are named (1k = 1,024 … 128k = 131,072);
 * `unknown` when it reported none, so every series carries the label.
 */
export const INPUT_LENGTH_BANDS = [
  { name: 'lt_1k', below: 1024 },
  { name: 'lt_8k', below: 8192 },
  { name: 'lt_32k', below: 32_768 },
  { name: 'lt_128k', below: 131_072 },
  { name: 'ge_128k', below: Number.POSITIVE_INFINITY },
  { name: 'unknown', below: Number.NaN },
] as const

/** The index in INPUT_LENGTH_BANDS of a request with this many reported input tokens (undefined: unknown). */
function inputLengthBandOf(inputTokens: number | undefined): number {
  if (inputTokens === undefined) return INPUT_LENGTH_BANDS.length - 1
  let i = 0
  while (inputTokens >= INPUT_LENGTH_BANDS[i].below) i++
  return i
}

/**
 * Runs of equal content-chunk gaps: for run r, `times[r]` consecutive chunks j ≥ 2 each came
 * `seconds[r]` after the previous one carrying `tokens[r]` tokens. Inter-chunk latency observes
 * each gap once (weight `times`); token-weighted ITL observes seconds/tokens with weight
 * tokens × times. A fast stream is a few runs (chunks of one read have gap 0), not one per chunk.
 */
export interface GapRuns {
  readonly count: number
  readonly seconds: Float64Array
  readonly tokens: Float64Array
  readonly times: Float64Array
}

/** Runs of equal token counts k_j over every content chunk (the first included). */
interface TokenRuns {
  readonly count: number
  readonly tokens: Float64Array
  readonly times: Float64Array
}

/** Who a finished request was (what the exchange knows besides its Measurement). */
export interface RequestFacts {
  readonly id: string
  readonly route: { readonly label: string; readonly slo?: unknown }
  readonly provider: string
  /** The tenant label value, resolved once when the request opened; undefined with `metrics.tenant` off. */
  readonly tenant?: string
  readonly method: string
  /** Path after the route prefix, without the query. */
  readonly path: string
  /** The request's own model (body, else path), else the response's. */
  readonly model: string | undefined
  readonly responseModel: string | undefined
  readonly usageInjected: boolean
  /** The route's requests in flight when it started, itself included. */
  readonly concurrency: number
  /** ms, monotonic: request headers received. */
  readonly tReq: number
  /** The proxy's own cost, seconds. */
  readonly overhead: { readonly request: number | undefined; readonly firstChunk: number | undefined; readonly chunk: number | undefined }
  /** Its span's ids and the caller's span, with `otel.traces` on. */
  readonly trace?: TraceStart
}

/** What every sink records of one finished request. Seconds; undefined: not observed. */
export interface Observations {
  readonly id: string
  readonly labels: SeriesLabels
  /** The values of SERIES_LABELS, and their key (values joined): the sinks' series handles. */
  readonly labelValues: readonly string[]
  readonly key: string
  /** The request's label set was beyond `limits.max_label_sets`: it is recorded under the overflow set (llm_label_sets_folded_total). */
  readonly labelSetFolded: boolean
  /** `labelValues` plus the length band when `metrics.length_band_label` is on (ITL and TPOT series). */
  readonly bandedValues: readonly string[]
  readonly bandedKey: string
  /** `labelValues` plus the input-length band when `metrics.input_length_band_label` is on (TTFT and E2E series). */
  readonly inputBandedValues: readonly string[]
  readonly inputBandedKey: string
  /** Index in INPUT_LENGTH_BANDS of the reported input count (the live page's prompt bands). */
  readonly inputLengthBand: number
  readonly outcome: Outcome
  readonly statusCode: number
  /** OpenTelemetry's `error.type`: undefined for ok. */
  readonly errorType: string | undefined
  /** The `error_type` label: who is to blame, from the upstream-error table (`none` for ok). */
  readonly errorClass: ErrorType
  /** Index in LENGTH_BANDS of the output count (the live page's bands). */
  readonly lengthBand: number
  readonly e2e: number
  /** TTFT, whatever the outcome (a real wait). */
  readonly ttft: number | undefined
  /** TTFT of an ok request (OpenTelemetry's server-side time to first token). */
  readonly okTtft: number | undefined
  readonly ttfot: number | undefined
  readonly headers: number | undefined
  /** Request-weighted TPOT, ok requests only. */
  readonly tpot: number | undefined
  /** Per-user TPS, ok requests only. */
  readonly tps: number | undefined
  readonly maxGap: number | undefined
  readonly gaps: GapRuns
  readonly chunkTokens: TokenRuns
  readonly stalls: number
  /** Output tokens by the rule above, and their source. */
  readonly outputTokens: number | undefined
  readonly outputSource: TokenSource
  /** Input tokens the provider reported (0 included). */
  readonly inputTokens: number | undefined
  /** Reasoning tokens and cached input tokens (read, written) the provider reported (0 included); never estimated. */
  readonly reasoningTokens: number | undefined
  readonly cacheReadTokens: number | undefined
  readonly cacheWriteTokens: number | undefined
  readonly estimateRatio: number | undefined
  /** With `pricing:` set: the request's cost by token kind, and its tokens with no price (src/cost/cost.ts). */
  readonly cost: RequestCost | undefined
  readonly concurrency: number
  readonly overheadRequest: number | undefined
  readonly overheadFirstChunk: number | undefined
  readonly overheadChunk: number | undefined
  /** Speculative-decoding draft tokens proposed and accepted, where the upstream reported them. */
  readonly speculative: { readonly drafted: number; readonly accepted: number } | undefined
  /** The upstream's own timings by phase (seconds), each phase it reported once. */
  readonly upstreamReported: ReportedTimes | undefined
  /** TTFT − the upstream's reported queue + load + prompt, where it reported them. */
  readonly outsideUpstream: number | undefined
  /** Seconds a streamed response waited for the client's socket (0 included), once per streamed request. */
  readonly clientWriteWait: number | undefined
  /** That wait was over SLOW_CLIENT_SECONDS (the live page's share of slow clients); undefined when not streamed. */
  readonly slowClient: boolean | undefined
  /** The route has an SLO (its met/missed series exist from its first request on); the verdict when judged. */
  readonly sloJudged: boolean
  readonly slo: SloVerdict | undefined
  readonly usageInjected: boolean
  readonly parseError: string | undefined
  /** `gen_ai.operation.name`, when the request is a GenAI operation and OpenTelemetry is on. */
  readonly operation: string | undefined
  /** The response's model, bounded like the model label (OpenTelemetry only). */
  readonly responseModel: string | undefined
  /** The request's span, when `otel.traces` keeps it (the span is exported and exemplars name it). */
  readonly trace: TraceIds | undefined
  /** ms, monotonic: when the response closed. */
  readonly endedAt: number
  /** The request's own figures as measured, for its log line and `/debug/requests/{id}`. */
  readonly measurement: Measurement
}

export interface RecordPolicyOptions {
  readonly maxModelsPerRoute: number
  /** `limits.max_label_sets` (default: no bound). */
  readonly maxLabelSets?: number
  /** Called once, the first time a label set is folded by the budget (the one warn line). */
  readonly onFirstFold?: () => void
  /** `metrics.length_band_label`: ITL and TPOT series carry `length_band`. */
  readonly lengthBandLabel: boolean
  /** `metrics.input_length_band_label`: TTFT and E2E series carry `input_length_band`. */
  readonly inputLengthBandLabel?: boolean
  /** OpenTelemetry is on: work out the GenAI operation and the bounded response model. */
  readonly genAi: boolean
  /** `metrics.tenant` is on: every series carries `tenant` after SERIES_LABELS. */
  readonly tenant?: boolean
  /** `otel.traces` is on: which requests' spans are kept (trace-sampling.ts). */
  readonly traces?: TraceSampling
  /** `pricing:` is set: the prices each request's cost is worked out with. */
  readonly prices?: PriceTable
}

/** The error type a failed or cancelled request is reported with (OpenTelemetry's `error.type`). */
function errorType(m: Measurement): string | undefined {
  if (m.outcome === Outcome.ok) return undefined
  if (m.outcome === Outcome.cancelled) return 'cancelled'
  if (m.failure !== undefined) return m.failure
  return isSuccess(m.statusCode) ? 'provider_error' : String(m.statusCode)
}

const S = 1 / 1000
const NO_RUNS: GapRuns = { count: 0, seconds: new Float64Array(0), tokens: new Float64Array(0), times: new Float64Array(0) }
const NO_TOKEN_RUNS: TokenRuns = { count: 0, tokens: new Float64Array(0), times: new Float64Array(0) }

/** The gaps of chunks j ≥ 2, equal neighbours folded into runs. */
function gapRuns(log: Measurement['chunks']): GapRuns {
  const n = log.count
  if (n < 2) return NO_RUNS
  const seconds = new Float64Array(n - 1)
  const tokens = new Float64Array(n - 1)
  const times = new Float64Array(n - 1)
  let r = -1
  let prev = log.at(0)
  for (let i = 1; i < n; i++) {
    const at = log.at(i)
    const g = (at - prev) * S
    const k = log.tokens(i)
    prev = at
    if (r >= 0 && seconds[r] === g && tokens[r] === k) times[r]++
    else {
      r++
      seconds[r] = g
      tokens[r] = k
      times[r] = 1
    }
  }
  return { count: r + 1, seconds, tokens, times }
}

/** Every chunk's k_j, equal neighbours folded into runs. */
function tokenRuns(log: Measurement['chunks']): TokenRuns {
  const n = log.count
  if (n === 0) return NO_TOKEN_RUNS
  const tokens = new Float64Array(n)
  const times = new Float64Array(n)
  let r = -1
  for (let i = 0; i < n; i++) {
    const k = log.tokens(i)
    if (r >= 0 && tokens[r] === k) times[r]++
    else {
      r++
      tokens[r] = k
      times[r] = 1
    }
  }
  return { count: r + 1, tokens, times }
}

/** Label values and their key, made once per distinct label set. */
interface LabelSet {
  readonly labels: SeriesLabels
  readonly values: readonly string[]
  readonly key: string
  /** Beyond the label-set budget: these are the overflow set's values. */
  readonly folded: boolean
  /** By length band: the values with the band appended (or the same values with the label off). */
  readonly banded: readonly { readonly values: readonly string[]; readonly key: string }[]
  /** By input-length band, the same way. */
  readonly inputBanded: readonly { readonly values: readonly string[]; readonly key: string }[]
}

const labelKey = (provider: string, model: string, route: string, tenant: string | undefined): string =>
  tenant === undefined ? `${provider}\u0000${model}\u0000${route}` : `${provider}\u0000${model}\u0000${route}\u0000${tenant}`

function labelSet(provider: string, model: string, route: string, t: string | undefined, folded: boolean, bands: { readonly length: boolean; readonly input: boolean }): LabelSet {
  const key = labelKey(provider, model, route, t)
  const values = t === undefined ? [provider, model, route] : [provider, model, route, t]
  const banded = bands.length ? LENGTH_BANDS.map((b) => ({ values: [...values, b.name], key: `${key}\u0000${b.name}` })) : LENGTH_BANDS.map(() => ({ values, key }))
  const inputBanded = bands.input ? INPUT_LENGTH_BANDS.map((b) => ({ values: [...values, b.name], key: `${key}\u0000${b.name}` })) : INPUT_LENGTH_BANDS.map(() => ({ values, key }))
  return { labels: t === undefined ? { provider, model, route } : { provider, model, route, tenant: t }, values, key, folded, banded, inputBanded }
}

/** Label sets kept for reuse; past this many the cache starts over (the label bound keeps the real count small). */
const LABEL_CACHE = 10_000

export class RecordPolicy {
  readonly #models: LabelLimiter
  readonly #options: RecordPolicyOptions
  readonly #budget: LabelSetBudget
  readonly #sets = new Map<string, LabelSet>()
  #folded = false

  constructor(options: RecordPolicyOptions) {
    this.#options = options
    this.#models = new LabelLimiter(options.maxModelsPerRoute)
    this.#budget = new LabelSetBudget(options.maxLabelSets ?? Number.POSITIVE_INFINITY)
  }

  /** The label names of every llm_ series, in the order of `Observations.labelValues`: SERIES_LABELS, plus `tenant` when on. */
  get labelNames(): readonly string[] {
    return this.#options.tenant === true ? [...SERIES_LABELS, TENANT_LABEL] : SERIES_LABELS
  }

  /** The label names of the TTFT and E2E series (`labelNames`, plus `input_length_band` when on; E2E adds `outcome`). */
  get inputBandedLabelNames(): readonly string[] {
    return this.#options.inputLengthBandLabel === true ? [...this.labelNames, 'input_length_band'] : this.labelNames
  }

  /** The label names of the ITL and TPOT series (`labelNames`, plus `length_band` when on). */
  get bandedLabelNames(): readonly string[] {
    return this.#options.lengthBandLabel ? [...this.labelNames, 'length_band'] : this.labelNames
  }

  /**
   * The label values a request in flight is counted under (the in-flight gauge, at scrape time).
   * A scrape admits the model and the label set as the request's end would (it will be recorded
   * under them): reading without admitting let every model in flight through while the bound had
   * room, and the gauge kept each of them at 0 afterwards, beyond the cap.
   */
  inFlightValues(provider: string, route: string, model: string | undefined, tenant: string | undefined): readonly string[] {
    return this.#set(provider, this.#models.value(route, model), route, tenant).values
  }

  /** The label values a finished request is counted under (admits its model while the route has room). */
  labelsOf(who: Pick<RequestFacts, 'provider' | 'route' | 'model' | 'tenant'>): SeriesLabels {
    return this.#set(who.provider, this.#models.value(who.route.label, who.model), who.route.label, who.tenant).labels
  }

  observe(who: RequestFacts, m: Measurement): Observations {
    const route = who.route.label
    const set = this.#set(who.provider, this.#models.value(route, who.model), route, who.tenant)
    const t = m.timing
    const ok = m.outcome === Outcome.ok
    const band = lengthBandOf(m.outputTokens)
    const genAi = this.#options.genAi
    const banded = set.banded[band]
    const inputBand = inputLengthBandOf(m.inputTokens)
    const inputBanded = set.inputBanded[inputBand]
    return {
      id: who.id,
      labels: set.labels,
      labelValues: set.values,
      key: set.key,
      labelSetFolded: set.folded,
      bandedValues: banded.values,
      bandedKey: banded.key,
      inputBandedValues: inputBanded.values,
      inputBandedKey: inputBanded.key,
      inputLengthBand: inputBand,
      outcome: m.outcome,
      statusCode: m.statusCode,
      errorType: errorType(m),
      errorClass: errorTypeOf(m),
      lengthBand: band,
      e2e: t.e2e,
      ttft: t.ttft,
      okTtft: ok ? t.ttft : undefined,
      ttfot: t.ttfot,
      headers: m.headersSeconds,
      tpot: ok ? t.tpot : undefined,
      tps: ok ? t.tps : undefined,
      maxGap: t.maxGap,
      gaps: gapRuns(m.chunks),
      chunkTokens: tokenRuns(m.chunks),
      stalls: m.stalls,
      // A count the provider reported (0 included), or tokens that were streamed; nothing to count otherwise.
      outputTokens: m.outputSource === TokenSource.usage || m.outputTokens > 0 ? m.outputTokens : undefined,
      outputSource: m.outputSource,
      inputTokens: m.inputTokens,
      reasoningTokens: m.reasoningTokens,
      cacheReadTokens: m.cacheReadTokens,
      cacheWriteTokens: m.cacheWriteTokens,
      estimateRatio: m.estimateRatio,
      cost: this.#options.prices === undefined ? undefined : requestCost(this.#options.prices, who.provider, who.model, who.responseModel, m),
      concurrency: who.concurrency,
      overheadRequest: who.overhead.request,
      overheadFirstChunk: who.overhead.firstChunk,
      overheadChunk: who.overhead.chunk,
      upstreamReported: m.reported,
      speculative: m.speculative,
      outsideUpstream: m.outsideUpstream,
      clientWriteWait: m.clientWriteWait,
      slowClient: m.clientWriteWait === undefined ? undefined : m.clientWriteWait > SLOW_CLIENT_SECONDS,
      sloJudged: who.route.slo !== undefined,
      slo: m.slo,
      usageInjected: who.usageInjected,
      parseError: m.parseError,
      operation: genAi ? genAiOperation(who.method, who.path) : undefined,
      responseModel: genAi && who.responseModel !== undefined ? this.#models.value(`${route}\u0000response`, who.responseModel) : undefined,
      trace: who.trace !== undefined && this.#options.traces !== undefined && keepTrace(who.trace, m, this.#options.traces) ? who.trace : undefined,
      endedAt: who.tReq + t.e2e * 1000,
      measurement: m,
    }
  }

  #set(provider: string, model: string, route: string, tenant: string | undefined): LabelSet {
    // The tenant only when the label is on (the resolver gives none otherwise).
    const t = this.#options.tenant === true ? (tenant ?? 'none') : undefined
    const key = labelKey(provider, model, route, t)
    let set = this.#sets.get(key)
    if (set === undefined) {
      // The overflow set (model and tenant `other`) is never counted against the budget; a set
      // once admitted stays so, one once folded stays folded (the budget, once full, stays full).
      const overflow = model === OTHER && (t === undefined || t === OTHER)
      const bands = { length: this.#options.lengthBandLabel, input: this.#options.inputLengthBandLabel === true }
      set = overflow || this.#budget.admit(key) ? labelSet(provider, model, route, t, false, bands) : labelSet(provider, OTHER, route, t === undefined ? undefined : OTHER, true, bands)
      if (set.folded && !this.#folded) {
        this.#folded = true
        this.#options.onFirstFold?.()
      }
      if (this.#sets.size >= LABEL_CACHE) this.#sets.clear()
      this.#sets.set(key, set)
    }
    return set
  }
}
