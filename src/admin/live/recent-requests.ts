import type { FinishedRequest } from './finished-request.ts'
import { timeSpentFields } from '../../record/request-log.ts'
import { REPORTED_PHASES } from '../../parsers/reported-times.ts'
import type { ReportedTimes } from '../../parsers/reported-times.ts'

/**
 * The last N finished requests for `GET /debug/requests/{id}`, scanned from the newest. Columns,
 * not an object a request, so nothing is promoted to the old generation; a scan, not a Map, since
 * only the debug endpoint looks up (bench/results/ab-notes.md).
 */

/** A finished request as the store keeps it: its figures without the per-gap arrays. */
export type RecentRequest = Omit<
  FinishedRequest,
  'gaps' | 'lengthBand' | 'inputLengthBand' | 'slo' | 'slowClient' | 'tenant'
>

/** The numeric fields, one column each, in the order add() writes them (NaN stands for undefined). */
const NUMBERS = [
  'statusCode',
  'ttft',
  'ttfot',
  'headers',
  'e2e',
  'tpot',
  'tps',
  'itlP50',
  'itlP99',
  'maxGap',
  'stalls',
  'outputTokens',
  'inputTokens',
  'chunks',
  'concurrency',
  'endedAt',
  'outsideUpstream',
  'clientWriteWait',
  'queue',
  'load',
  'prompt',
  'generation',
  'total',
  'cost',
  'costEstimated',
] as const satisfies readonly (keyof RecentRequest | keyof ReportedTimes)[]
const WIDTH = NUMBERS.length
/** Rows per page: pages are allocated as the ring fills, so a large capacity costs only what is used. */
const PAGE_BITS = 10
const PAGE_ROWS = 1 << PAGE_BITS

const num = (v: number | undefined): number => (v === undefined ? Number.NaN : v)
const opt = (v: number): number | undefined => (Number.isNaN(v) ? undefined : v)

export class RecentRequests {
  readonly capacity: number
  readonly #ids: string[] = []
  readonly #routes: string[] = []
  readonly #providers: string[] = []
  readonly #models: string[] = []
  readonly #outcomes: FinishedRequest['outcome'][] = []
  readonly #sources: string[] = []
  readonly #errorTypes: FinishedRequest['errorType'][] = []
  readonly #currencies: (string | undefined)[] = []
  readonly #pages: Float64Array[] = []
  #next = 0

  constructor(capacity: number) {
    this.capacity = capacity
  }

  /** Requests held (a reused id is held once per request; `get` finds the latest). */
  get size(): number {
    return this.#ids.length
  }

  add(r: FinishedRequest): void {
    if (this.capacity === 0) return
    const slot = this.#next
    this.#ids[slot] = r.id
    this.#routes[slot] = r.route
    this.#providers[slot] = r.provider
    this.#models[slot] = r.model
    this.#outcomes[slot] = r.outcome
    this.#sources[slot] = r.outputSource
    this.#errorTypes[slot] = r.errorType
    this.#currencies[slot] = r.currency
    const page = slot >>> PAGE_BITS
    let row = this.#pages[page]
    if (row === undefined) {
      row = new Float64Array(Math.min(PAGE_ROWS, this.capacity - page * PAGE_ROWS) * WIDTH)
      this.#pages[page] = row
    }
    // Spelled out, not a loop over NUMBERS: r[key] with a variable key is a slow keyed load.
    let o = (slot & (PAGE_ROWS - 1)) * WIDTH
    row[o++] = r.statusCode
    row[o++] = num(r.ttft)
    row[o++] = num(r.ttfot)
    row[o++] = num(r.headers)
    row[o++] = r.e2e
    row[o++] = num(r.tpot)
    row[o++] = num(r.tps)
    row[o++] = num(r.itlP50)
    row[o++] = num(r.itlP99)
    row[o++] = num(r.maxGap)
    row[o++] = r.stalls
    row[o++] = r.outputTokens
    row[o++] = num(r.inputTokens)
    row[o++] = r.chunks
    row[o++] = r.concurrency
    row[o++] = r.endedAt
    row[o++] = num(r.outsideUpstream)
    row[o++] = num(r.clientWriteWait)
    const reported = r.upstreamReported
    row[o++] = num(reported?.queue)
    row[o++] = num(reported?.load)
    row[o++] = num(reported?.prompt)
    row[o++] = num(reported?.generation)
    row[o++] = num(reported?.total)
    row[o++] = num(r.cost)
    row[o] = r.costEstimated === undefined ? Number.NaN : r.costEstimated ? 1 : 0
    this.#next = slot + 1 === this.capacity ? 0 : slot + 1
  }

  get(id: string): RecentRequest | undefined {
    const held = this.#ids.length
    for (let back = 1; back <= held; back++) {
      const slot = (this.#next - back + held) % held
      if (this.#ids[slot] === id) return this.#row(slot)
    }
    return undefined
  }

  #row(slot: number): RecentRequest {
    const row = this.#pages[slot >>> PAGE_BITS]
    const o = (slot & (PAGE_ROWS - 1)) * WIDTH
    // Read by NUMBERS' order, the order add() writes (the ring's round-trip test holds them together).
    const field = Object.fromEntries(NUMBERS.map((key, i) => [key, row[o + i]])) as Record<
      (typeof NUMBERS)[number],
      number
    >
    return {
      id: this.#ids[slot],
      route: this.#routes[slot],
      provider: this.#providers[slot],
      model: this.#models[slot],
      outcome: this.#outcomes[slot],
      outputSource: this.#sources[slot],
      errorType: this.#errorTypes[slot],
      statusCode: field.statusCode,
      ttft: opt(field.ttft),
      ttfot: opt(field.ttfot),
      headers: opt(field.headers),
      e2e: field.e2e,
      tpot: opt(field.tpot),
      tps: opt(field.tps),
      itlP50: opt(field.itlP50),
      itlP99: opt(field.itlP99),
      maxGap: opt(field.maxGap),
      stalls: field.stalls,
      outputTokens: field.outputTokens,
      inputTokens: opt(field.inputTokens),
      chunks: field.chunks,
      concurrency: field.concurrency,
      endedAt: field.endedAt,
      upstreamReported: reportedOf(field),
      outsideUpstream: opt(field.outsideUpstream),
      clientWriteWait: opt(field.clientWriteWait),
      cost: opt(field.cost),
      currency: this.#currencies[slot],
      costEstimated: Number.isNaN(field.costEstimated) ? undefined : field.costEstimated === 1,
    } satisfies { readonly [K in keyof Required<RecentRequest>]: RecentRequest[K] }
  }
}

/** The reported phases of a row, only those it has; undefined when none. */
function reportedOf(field: Readonly<Record<keyof ReportedTimes, number>>): ReportedTimes | undefined {
  let reported: ReportedTimes | undefined
  for (const phase of REPORTED_PHASES) {
    const v = field[phase]
    if (Number.isNaN(v)) continue
    reported ??= {}
    reported[phase] = v
  }
  return reported
}

const ms = (seconds: number | undefined): number | null =>
  seconds === undefined ? null : Math.round(seconds * 1e6) / 1e3

/** The JSON of `/debug/requests/{id}`: the names and rounding of the request's log line, plus the live figures; `now` dates `endedAt`. */
export function requestView(r: RecentRequest, now: number, wallNow: number): Record<string, unknown> {
  return {
    request_id: r.id,
    route: r.route,
    provider: r.provider,
    model: r.model,
    status: r.statusCode,
    outcome: r.outcome,
    error_type: r.errorType,
    headers_ms: ms(r.headers),
    ttft_ms: ms(r.ttft),
    ttfot_ms: ms(r.ttfot),
    e2e_ms: ms(r.e2e),
    tpot_ms: ms(r.tpot),
    itl_p50_ms: ms(r.itlP50),
    itl_p99_ms: ms(r.itlP99),
    max_gap_ms: ms(r.maxGap),
    stalls: r.stalls,
    output_tokens: r.outputTokens,
    output_source: r.outputSource,
    input_tokens: r.inputTokens ?? null,
    chunks: r.chunks,
    tps: r.tps === undefined ? null : Math.round(r.tps * 100) / 100,
    concurrency: r.concurrency,
    ...timeSpentFields(r.upstreamReported, r.outsideUpstream, r.clientWriteWait, ms),
    cost: r.cost === undefined ? null : { currency: r.currency, total: r.cost, estimated: r.costEstimated === true },
    ended_at: new Date(wallNow - (now - r.endedAt)).toISOString(),
  }
}
