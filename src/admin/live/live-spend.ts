import { SlidingCounter } from './sliding-sketch.ts'
import type { FinishedRequest } from './finished-request.ts'
import type { SpendView } from './live-message-types.ts'

/** The live page's spend (with `pricing:`): sliding sums of cost by route and model and by tenant. Pure, like live-stats.ts. */

/** Distinct models (by route) or tenants kept; later ones are summed under `other`. */
const MAX_KEYS = 1000
/** Rows the page shows of each list, the costliest over 15 minutes first. */
const MAX_SHOWN = 10
/** Past the longest window and a slot with nothing spent, a row is dropped. */
const FORGET_MS = 16 * 60_000

interface Row {
  readonly route: string
  readonly name: string
  readonly spent: SlidingCounter
  /** Part of it priced from estimated token counts (a stream cut before its usage). */
  readonly estimated: SlidingCounter
  lastAt: number
}

function rowOf(rows: Map<string, Row>, route: string, name: string, now: number): Row {
  let key = `${route}\u0000${name}`
  let row = rows.get(key)
  if (row === undefined) {
    if (rows.size >= MAX_KEYS) {
      key = `${route}\u0000other`
      name = 'other'
      row = rows.get(key)
    }
    if (row === undefined) {
      row = { route, name, spent: new SlidingCounter(), estimated: new SlidingCounter(), lastAt: now }
      rows.set(key, row)
    }
  }
  row.lastAt = now
  return row
}

const sums = (c: SlidingCounter, now: number): number[] => [c.sum(0, now), c.sum(1, now), c.sum(2, now)]

export class LiveSpend {
  /** The currency of the first priced request (one price table per process). */
  currency: string | undefined
  readonly total = new SlidingCounter()
  readonly #byModel = new Map<string, Row>()
  readonly #byTenant = new Map<string, Row>()

  add(r: FinishedRequest): void {
    if (r.cost === undefined) return
    const now = r.endedAt
    this.currency ??= r.currency
    this.total.add(r.cost, now)
    const estimated = r.costEstimated === true ? r.cost : 0
    for (const row of [
      rowOf(this.#byModel, r.route, r.model, now),
      ...(r.tenant === undefined ? [] : [rowOf(this.#byTenant, '', r.tenant, now)]),
    ]) {
      row.spent.add(r.cost, now)
      if (estimated > 0) row.estimated.add(estimated, now)
    }
  }

  /** The message's `spend`, or undefined before the first priced request. */
  view(now: number): SpendView | undefined {
    if (this.currency === undefined) return undefined
    const list = (rows: Map<string, Row>): { row: Row; spent: number[]; estimated: number[] }[] => {
      for (const [key, row] of rows) if (now - row.lastAt > FORGET_MS) rows.delete(key)
      return [...rows.values()]
        .map((row) => ({ row, spent: sums(row.spent, now) }))
        .sort((a, b) => b.spent[2] - a.spent[2] || (a.row.name < b.row.name ? -1 : 1))
        .slice(0, MAX_SHOWN)
        .map(({ row, spent }) => ({ row, spent, estimated: sums(row.estimated, now) }))
    }
    return {
      currency: this.currency,
      total: sums(this.total, now),
      byModel: list(this.#byModel).map(({ row, spent, estimated }) => ({
        route: row.route,
        model: row.name,
        spent,
        estimated,
      })),
      byTenant: list(this.#byTenant).map(({ row, spent, estimated }) => ({ tenant: row.name, spent, estimated })),
    }
  }
}
