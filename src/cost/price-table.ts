import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { TokentapError } from '../errors.ts'
import { nameCandidates } from './model-names.ts'

/**
 * Prices per token by model from, in order, `pricing.models` (per million), a LiteLLM-format `pricing.file` (per token)
 * and the shipped config/prices.json; a bad entry stops start-up naming its key (docs/cost.md).
 */

/** Prices of each token kind, in the currency per token; a kind left out has no price. */
export interface KindPrices {
  readonly input?: number
  readonly output?: number
  readonly cacheRead?: number
  readonly cacheWrite?: number
  /** Anthropic's 1-hour cache writes (the 5-minute ones are `cacheWrite`). */
  readonly cacheWrite1h?: number
  readonly reasoning?: number
}

/** Long-context prices: for a request whose input count is above `aboveInputTokens`, they replace the base ones. */
interface PriceTier extends KindPrices {
  readonly aboveInputTokens: number
}

export interface ModelPrice extends KindPrices {
  /** The table's name of the model (the log line's `priced_as`). */
  readonly name: string
  /** Highest threshold first. */
  readonly tiers: readonly PriceTier[]
}

/** The shipped snapshot, beside config/default.yaml in the package (run from src/ or dist/src/). */
export const SNAPSHOT_FILE =
  ['../../config/prices.json', '../../../config/prices.json']
    .map((p) => fileURLToPath(new URL(p, import.meta.url)))
    .find((p) => existsSync(p)) ?? 'config/prices.json'

const invalid = (detail: string): TokentapError => new TokentapError('TOKENTAP_ERR_CONFIG_INVALID', detail)

/** One model's prices per million tokens, as `pricing.models` gives them. */
interface MillionPrices {
  readonly input?: number
  readonly output?: number
  readonly cache_read?: number
  readonly cache_write?: number
  readonly cache_write_1h?: number
  readonly reasoning?: number
}

/**
 * What the table reads of a validated `pricing:` (its schema and defaults: config/schema.ts, whose
 * validation loads the table through `pricesOf`, so cost/ names the shape instead of importing it).
 */
export interface PricingSettings {
  readonly currency: string
  readonly file?: string
  readonly snapshot: boolean
  readonly aliases: Readonly<Record<string, string>>
  readonly models: Readonly<
    Record<
      string,
      MillionPrices & { readonly tiers?: readonly (MillionPrices & { readonly above_input_tokens: number })[] }
    >
  >
}

/** LiteLLM's keys → the kinds they price (per token). https://github.com/BerriAI/litellm/blob/main/model_prices_and_context_window.json */
const LITELLM_KEYS = {
  input_cost_per_token: 'input',
  output_cost_per_token: 'output',
  cache_read_input_token_cost: 'cacheRead',
  cache_creation_input_token_cost: 'cacheWrite',
  cache_creation_input_token_cost_above_1hr: 'cacheWrite1h',
  output_cost_per_reasoning_token: 'reasoning',
} as const satisfies Record<string, keyof KindPrices>

/** `<key>_above_<N>k_tokens`: the long-context tiers (`_above_128k_tokens`, `_above_200k_tokens`). */
const LITELLM_TIER = /^(.+)_above_(\d+)k_tokens$/

type Mutable<T> = { -readonly [K in keyof T]: T[K] }

function litellmPrice(where: string, name: string, entry: unknown): ModelPrice | undefined {
  if (typeof entry !== 'object' || entry === null || Array.isArray(entry))
    throw invalid(`${where}: '${name}' must be an object of prices`)
  const base: Mutable<KindPrices> = {}
  const tiers = new Map<number, Mutable<PriceTier>>()
  for (const [key, value] of Object.entries(entry)) {
    let kind: keyof KindPrices | undefined = LITELLM_KEYS[key as keyof typeof LITELLM_KEYS]
    let tier: Mutable<KindPrices> = base
    if (kind === undefined) {
      const m = LITELLM_TIER.exec(key)
      kind = m === null ? undefined : LITELLM_KEYS[m[1] as keyof typeof LITELLM_KEYS]
      if (m === null || kind === undefined) continue
      const above = Number(m[2]) * 1000
      let t = tiers.get(above)
      if (t === undefined) {
        t = { aboveInputTokens: above }
        tiers.set(above, t)
      }
      tier = t
    }
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
      throw invalid(`${where}: '${name}.${key}' must be a price per token (a number, 0 or more)`)
    tier[kind] = value
  }
  // Image, audio-only and search entries price no tokens: not models tokentap can price.
  if (base.input === undefined && base.output === undefined) return undefined
  return { ...base, name, tiers: [...tiers.values()].sort((a, b) => b.aboveInputTokens - a.aboveInputTokens) }
}

/** A LiteLLM-format document (parsed JSON) → prices by lower-cased name. `sample_spec` and `_`-keys are not models. */
export function parseLitellm(where: string, doc: unknown): Map<string, ModelPrice> {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw invalid(`${where}: must be a JSON object of models`)
  const out = new Map<string, ModelPrice>()
  for (const [name, entry] of Object.entries(doc)) {
    if (name === 'sample_spec' || name.startsWith('_')) continue
    const price = litellmPrice(where, name, entry)
    if (price !== undefined) out.set(name.toLowerCase(), price)
  }
  return out
}

/** Reads and parses a LiteLLM-format file; `key` is the config key that named it. */
export function readLitellmFile(key: string, file: string): Map<string, ModelPrice> {
  const where = `'${key}' ${file}`
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    throw invalid(`${where}: cannot be read: ${(err as Error).message}`)
  }
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch (err) {
    throw invalid(`${where}: is not valid JSON: ${(err as Error).message}`)
  }
  return parseLitellm(where, doc)
}

const PER_MILLION = 1e6

function fromMillion(p: MillionPrices): Mutable<KindPrices> {
  const out: Mutable<KindPrices> = {}
  if (p.input !== undefined) out.input = p.input / PER_MILLION
  if (p.output !== undefined) out.output = p.output / PER_MILLION
  if (p.cache_read !== undefined) out.cacheRead = p.cache_read / PER_MILLION
  if (p.cache_write !== undefined) out.cacheWrite = p.cache_write / PER_MILLION
  if (p.cache_write_1h !== undefined) out.cacheWrite1h = p.cache_write_1h / PER_MILLION
  if (p.reasoning !== undefined) out.reasoning = p.reasoning / PER_MILLION
  return out
}

/** The config's `pricing.models` (validated by the schema: numbers ≥ 0) → prices per token by lower-cased name. */
function configTable(models: PricingSettings['models']): Map<string, ModelPrice> {
  const out = new Map<string, ModelPrice>()
  for (const [name, p] of Object.entries(models)) {
    if (p.input === undefined && p.output === undefined)
      throw invalid(`'pricing.models.${name}' needs an 'input' or 'output' price`)
    const tiers = (p.tiers ?? [])
      .map((t) => ({ ...fromMillion(t), aboveInputTokens: t.above_input_tokens }))
      .sort((a, b) => b.aboveInputTokens - a.aboveInputTokens)
    out.set(name.toLowerCase(), { ...fromMillion(p), name, tiers })
  }
  return out
}

/** Resolved prices kept per distinct (provider, models); past this many the cache starts over. */
const CACHE = 10_000

/** The price tables in order, and the model-name resolution over them. */
export class PriceTable {
  readonly currency: string
  readonly #sources: readonly Map<string, ModelPrice>[]
  readonly #aliases: ReadonlyMap<string, string>
  readonly #cache = new Map<string, ModelPrice | null>()

  constructor(
    currency: string,
    sources: readonly Map<string, ModelPrice>[],
    aliases: ReadonlyMap<string, string> = new Map(),
  ) {
    this.currency = currency
    this.#sources = sources
    this.#aliases = aliases
  }

  /** Every source the config names, loaded now (start-up): a bad one throws, naming its key. */
  static fromConfig(config: PricingSettings): PriceTable {
    const sources = [configTable(config.models)]
    if (config.file !== undefined) sources.push(readLitellmFile('pricing.file', config.file))
    if (config.snapshot) sources.push(readLitellmFile('pricing.snapshot', SNAPSHOT_FILE))
    const aliases = new Map(Object.entries(config.aliases).map(([k, v]) => [k.toLowerCase(), v]))
    return new PriceTable(config.currency, sources, aliases)
  }

  /** The price of the request's model, else the response's (an Azure deployment names the model behind it), through each source in order, `provider/name` before `name`. */
  priceOf(
    provider: string,
    requestModel: string | undefined,
    responseModel: string | undefined,
  ): ModelPrice | undefined {
    const key = `${provider}\u0000${requestModel ?? ''}\u0000${responseModel ?? ''}`
    const cached = this.#cache.get(key)
    if (cached !== undefined) return cached ?? undefined
    const price = this.#resolve(provider, requestModel, responseModel)
    if (this.#cache.size >= CACHE) this.#cache.clear()
    this.#cache.set(key, price ?? null)
    return price
  }

  #resolve(
    provider: string,
    requestModel: string | undefined,
    responseModel: string | undefined,
  ): ModelPrice | undefined {
    const names: string[] = []
    for (const model of [requestModel, responseModel]) {
      if (model === undefined || model === '') continue
      const alias = this.#aliases.get(model.toLowerCase())
      for (const n of alias === undefined
        ? nameCandidates(model)
        : [...nameCandidates(alias), ...nameCandidates(model)])
        if (!names.includes(n)) names.push(n)
    }
    const prefix = `${provider.toLowerCase()}/`
    for (const source of this.#sources) {
      for (const n of names) {
        const price = source.get(prefix + n) ?? source.get(n)
        if (price !== undefined) return price
      }
    }
    return undefined
  }
}

const loaded = new WeakMap<PricingSettings, PriceTable>()

/** The price table of a validated config's `pricing:`, loaded once (validation loads it, so a bad one stops start-up). */
export function pricesOf(pricing: PricingSettings): PriceTable {
  let table = loaded.get(pricing)
  if (table === undefined) {
    table = PriceTable.fromConfig(pricing)
    loaded.set(pricing, table)
  }
  return table
}
