import { TokenSource } from '../timing/measurement.ts'
import type { Measurement } from '../timing/measurement.ts'
import type { KindPrices, ModelPrice, PriceTable } from './price-table.ts'

/**
 * A request's cost: token counts by kind times its model's prices (docs/cost.md). The parsers report cache tokens
 * inside the input and reasoning inside the output (parsers/types.ts `Usage`), so the kinds priced here are the parts.
 */

/** The `kind` label of llm_cost_total and llm_unpriced_tokens_total. */
export const CostKind = {
  input: 'input',
  output: 'output',
  cacheRead: 'cache_read',
  cacheWrite: 'cache_write',
  reasoning: 'reasoning',
} as const
export type CostKind = (typeof CostKind)[keyof typeof CostKind]

/** One kind of a request's tokens: how many, what the priced ones cost, how many had no price. */
export interface KindCost {
  readonly kind: CostKind
  /** Where the count comes from (the `source` label): the output's source for output, `usage` for the rest. */
  readonly source: TokenSource
  readonly tokens: number
  /** Cost of the priced tokens, in the table's currency; 0 when none were priced. */
  readonly cost: number
  /** Tokens of this kind with no price (the whole kind when the model has none). */
  readonly unpriced: number
}

export interface RequestCost {
  readonly currency: string
  /** The table's name of the model, when it has a price. */
  readonly pricedAs: string | undefined
  /** The kinds with tokens (count > 0), in CostKind order. */
  readonly kinds: readonly KindCost[]
  /** Σ cost over the kinds. */
  readonly total: number
  /** Tokens with no price, over the kinds. */
  readonly unpriced: number
  /** Part of the total comes from an estimated output count (the tokenizer's, e.g. a stream cut before its usage). */
  readonly estimated: boolean
}

/** The tier prices when the request's input is above a tier's threshold, else the base ones. */
function pricesFor(price: ModelPrice, input: number | undefined): KindPrices {
  if (input !== undefined) {
    for (const tier of price.tiers) if (input > tier.aboveInputTokens) return { ...price, ...definedOnly(tier) }
  }
  return price
}

function definedOnly(p: KindPrices): KindPrices {
  const out: Record<string, number> = {}
  for (const [k, v] of Object.entries(p)) if (v !== undefined) out[k] = v
  return out
}

/**
 * The cost of one finished request, or undefined with no token counts; as providers bill, an unpriced cache read is
 * input and reasoning is output, while an unpriced cache write stays unpriced rather than guessed.
 */
export function requestCost(
  table: PriceTable,
  provider: string,
  requestModel: string | undefined,
  responseModel: string | undefined,
  m: Measurement,
): RequestCost | undefined {
  const output = m.outputSource === TokenSource.usage || m.outputTokens > 0 ? m.outputTokens : undefined
  if (m.inputTokens === undefined && output === undefined) return undefined
  const price = table.priceOf(provider, requestModel, responseModel)
  const p: KindPrices = price === undefined ? {} : pricesFor(price, m.inputTokens)
  const read = m.cacheReadTokens ?? 0
  const write = m.cacheWriteTokens ?? 0
  const write1h = Math.min(m.cacheWrite1hTokens ?? 0, write)
  const reasoning = Math.min(m.reasoningTokens ?? 0, output ?? 0)
  const kinds: KindCost[] = []
  const add = (kind: CostKind, source: TokenSource, tokens: number, perToken: number | undefined): void => {
    if (tokens > 0)
      kinds.push({
        kind,
        source,
        tokens,
        cost: perToken === undefined ? 0 : tokens * perToken,
        unpriced: perToken === undefined ? tokens : 0,
      })
  }
  if (m.inputTokens !== undefined)
    add(CostKind.input, TokenSource.usage, Math.max(0, m.inputTokens - read - write), p.input)
  if (output !== undefined) add(CostKind.output, m.outputSource, output - reasoning, p.output)
  add(CostKind.cacheRead, TokenSource.usage, read, p.cacheRead ?? p.input)
  if (write > 0) {
    // The 5-minute and 1-hour writes are one kind, priced apart.
    const fiveMinute = write - write1h
    const cost =
      (fiveMinute > 0 && p.cacheWrite !== undefined ? fiveMinute * p.cacheWrite : 0) +
      (write1h > 0 && p.cacheWrite1h !== undefined ? write1h * p.cacheWrite1h : 0)
    const unpriced = (p.cacheWrite === undefined ? fiveMinute : 0) + (p.cacheWrite1h === undefined ? write1h : 0)
    kinds.push({ kind: CostKind.cacheWrite, source: TokenSource.usage, tokens: write, cost, unpriced })
  }
  add(CostKind.reasoning, TokenSource.usage, reasoning, p.reasoning ?? p.output)
  let total = 0
  let unpriced = 0
  let estimated = false
  for (const k of kinds) {
    total += k.cost
    unpriced += k.unpriced
    if (k.source === TokenSource.estimate && k.cost > 0) estimated = true
  }
  return { currency: table.currency, pricedAs: price?.name, kinds, total, unpriced, estimated }
}

/** A request's cost as its log line and `/debug/requests/{id}` show it. */
export function costFields(c: RequestCost): Record<string, unknown> {
  const byKind: Record<string, number> = {}
  for (const k of c.kinds) if (k.tokens > k.unpriced) byKind[k.kind] = k.cost
  return {
    currency: c.currency,
    total: c.total,
    by_kind: byKind,
    priced_as: c.pricedAs,
    unpriced_tokens: c.unpriced,
    estimated: c.estimated,
  }
}
