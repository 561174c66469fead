import type { Logger } from 'pino'
import type { Config } from '../config/schema.ts'
import { LabelSetBudget, labelKey, OTHER, ScopedCap, UNKNOWN } from './labels.ts'
import { TENANT_NONE } from './tenant.ts'

/**
 * The label caps of a whole process group, applied by the cluster primary before it adds the workers' series up, since
 * each worker (and each replacement) admits its own first values. Admitted stays admitted and folded stays folded, so
 * merged counters stay monotonic (docs/metrics.md, "Label caps and the series budget").
 */

export interface LabelCaps {
  /** `limits.max_models_per_route`. */
  readonly maxModelsPerRoute: number
  /** `metrics.tenant.max_values` (ignored when no family carries `tenant`). */
  readonly maxTenants: number
  /** `limits.max_label_sets`. */
  readonly maxLabelSets: number
}

/** The family that counts the requests recorded under the overflow set because of the label-set budget (its labels are that set's). */
export const FOLDED_FAMILY = 'llm_label_sets_folded_total'
/** The one warn line, logged the first time a label set is folded (by the process, or by the cluster primary for the group). */
export const FOLD_MESSAGE =
  'label sets beyond limits.max_label_sets are recorded with model and tenant "other" from now on (llm_label_sets_folded_total counts them)'

/** The family whose folded series the primary adds to FOLDED_FAMILY. */
const REQUESTS_FAMILY = 'llm_requests_total'

/** Label sets remembered beyond the caps' own memory: past this the cache starts over (decisions are reproducible). */
const DECISION_CACHE = 100_000

/** What the fold made of one base label set (provider, model, route[, tenant]). */
interface Decision {
  readonly model: string
  readonly tenant: string | undefined
  /** Folded by the budget (not by a value cap): its requests count in FOLDED_FAMILY. */
  readonly budget: boolean
}

/** Maps one series' label values (in its family's order) to the values it is merged under. */
export type SeriesMapper = (labels: readonly string[], value: number | undefined) => readonly string[]

/** Requests folded by the budget into one overflow set: its labels by name, and how many. */
interface FoldedRequests {
  readonly labels: Readonly<Record<string, string>>
  count: number
}

/** One merge: the mappers per family, and what it folded by the budget (added to FOLDED_FAMILY). */
export interface FoldPass {
  family(name: string, labelNames: readonly string[]): SeriesMapper | undefined
  /** Requests of llm_requests_total series this pass folded by the budget, by overflow set. */
  readonly foldedRequests: ReadonlyMap<string, FoldedRequests>
}

export class GroupLabelFold {
  readonly #models: ScopedCap
  readonly #tenants: ScopedCap
  readonly #budget: LabelSetBudget
  readonly #decided = new Map<string, Decision>()
  readonly #onFirstFold: (() => void) | undefined
  #warned = false

  /** `onFirstFold`: called once, the first time a label set is folded by the budget (the warn line). */
  constructor(caps: LabelCaps, onFirstFold?: () => void) {
    this.#models = new ScopedCap(caps.maxModelsPerRoute, [OTHER, UNKNOWN])
    this.#tenants = new ScopedCap(caps.maxTenants, [OTHER, TENANT_NONE])
    this.#budget = new LabelSetBudget(caps.maxLabelSets)
    this.#onFirstFold = onFirstFold
  }

  /** Calls `onFirstFold` once, when the group has folded something by the budget (here or in a worker). */
  noteFolded(count: number): void {
    if (count <= 0 || this.#warned) return
    this.#warned = true
    this.#onFirstFold?.()
  }

  #decide(provider: string, model: string, route: string, tenant: string | undefined): Decision {
    const raw = labelKey(provider, model, route, tenant)
    let d = this.#decided.get(raw)
    if (d !== undefined) return d
    const m = this.#models.value(route, model)
    const t = tenant === undefined ? undefined : this.#tenants.value('', tenant)
    if (m === OTHER && (t === undefined || t === OTHER)) d = { model: m, tenant: t, budget: false }
    else {
      d = this.#budget.admit(labelKey(provider, m, route, t))
        ? { model: m, tenant: t, budget: false }
        : { model: OTHER, tenant: t === undefined ? undefined : OTHER, budget: true }
    }
    if (this.#decided.size >= DECISION_CACHE) this.#decided.clear()
    this.#decided.set(raw, d)
    return d
  }

  /** A pass over one merge: each family's series mapped by the same decisions. */
  pass(): FoldPass {
    const foldedRequests = new Map<string, FoldedRequests>()
    return {
      foldedRequests,
      family: (name, labelNames) => {
        const pi = labelNames.indexOf('provider')
        const mi = labelNames.indexOf('model')
        const ri = labelNames.indexOf('route')
        if (pi < 0 || mi < 0 || ri < 0) return undefined
        const ti = labelNames.indexOf('tenant')
        const counts = name === REQUESTS_FAMILY
        return (labels, value) => {
          const tenant = ti < 0 ? undefined : labels[ti]
          const d = this.#decide(labels[pi], labels[mi], labels[ri], tenant)
          if (d.model === labels[mi] && d.tenant === tenant) return labels
          if (d.budget && counts) {
            const key = `${labels[pi]}\u0000${labels[ri]}`
            let f = foldedRequests.get(key)
            if (f === undefined) {
              f = {
                labels: { provider: labels[pi], model: OTHER, route: labels[ri], ...(ti < 0 ? {} : { tenant: OTHER }) },
                count: 0,
              }
              foldedRequests.set(key, f)
            }
            f.count += value ?? 0
          }
          const out = [...labels]
          out[mi] = d.model
          if (ti >= 0) out[ti] = d.tenant as string
          return out
        }
      },
    }
  }
}

/** The primary's fold for `config` (cluster/primary.ts), warning once through `logger` when it first folds a label set. */
export function groupLabelFold(config: Config, logger: Pick<Logger, 'warn'>): GroupLabelFold {
  const max = config.limits.max_label_sets
  return new GroupLabelFold(
    {
      maxModelsPerRoute: config.limits.max_models_per_route,
      maxTenants: config.metrics.tenant?.max_values ?? 1,
      maxLabelSets: max,
    },
    () => logger.warn({ max_label_sets: max }, FOLD_MESSAGE),
  )
}
