import { Counter } from '../prometheus/counter.ts'
import { CollectedGauge } from '../prometheus/gauge.ts'
import { Histogram } from '../prometheus/histogram.ts'
import type { NativeOptions } from '../prometheus/histogram.ts'
import { DEFAULT_BUCKETS } from '../../config/schema.ts'
import type { Config } from '../../config/schema.ts'

/** A family as configuration (as prom-client treats a metric); `buildFamilies` makes them in table order, the scrape order. */

export type Buckets = Config['metrics']['buckets']

/** Which label names a family starts with: the label set's, or with the length band or the input-length band appended. */
type LabelKind = 'base' | 'banded' | 'inputBanded'

export interface FamilySpec {
  readonly name: string
  readonly type: 'histogram' | 'counter' | 'gauge'
  readonly labels?: LabelKind
  /** Label names after the label set's. */
  readonly extra?: readonly string[]
  /** The configured buckets of that name (metrics.buckets), or fixed ones. */
  readonly buckets?: keyof Buckets | readonly number[]
  /** The help text, or a function of the settings it names. */
  readonly help: string | ((o: { readonly stallSeconds: number }) => string)
}

export type FamilyTable = Readonly<Record<string, FamilySpec>>

type FamilyOf<S extends FamilySpec> = S['type'] extends 'histogram'
  ? Histogram
  : S['type'] extends 'gauge'
    ? CollectedGauge
    : Counter
export type Families<T extends FamilyTable> = { readonly [K in keyof T]: FamilyOf<T[K]> }

export interface BuildOptions {
  /** The label names of each kind (the policy's: record/labels.ts). */
  readonly names: Readonly<Record<LabelKind, readonly string[]>>
  readonly buckets: Buckets
  readonly native: NativeOptions | undefined
  /** What the table's gauge (if any) counts at a scrape. */
  readonly collect?: (add: (labels: readonly string[], value: number) => void) => void
  readonly stallSeconds: number
}

export function buildFamilies<T extends FamilyTable>(table: T, o: BuildOptions): Families<T> {
  const out: Record<string, Histogram | Counter | CollectedGauge> = {}
  for (const [id, spec] of Object.entries(table)) {
    const labelNames = [...o.names[spec.labels ?? 'base'], ...(spec.extra ?? [])]
    const help = typeof spec.help === 'string' ? spec.help : spec.help(o)
    if (spec.type === 'gauge')
      out[id] = new CollectedGauge({ name: spec.name, help, labelNames, collect: o.collect ?? (() => {}) })
    else if (spec.type === 'counter') out[id] = new Counter({ name: spec.name, help, labelNames })
    else {
      out[id] = new Histogram({
        name: spec.name,
        help,
        labelNames,
        buckets: bucketsOf(spec.buckets ?? [], o.buckets),
        native: o.native,
      })
    }
  }
  return out as Families<T>
}

/** A family's buckets: fixed, or the configured ones of that name (the default where the config may leave them out). */
function bucketsOf(b: keyof Buckets | readonly number[], configured: Buckets): readonly number[] {
  if (typeof b !== 'string') return b
  return (
    (configured[b] as readonly number[] | undefined) ??
    (DEFAULT_BUCKETS as Readonly<Record<string, readonly number[]>>)[b]
  )
}
