/** A small parser of the Prometheus text format, for asserting on scrapes in tests. */

export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g

export function parseMetrics(text: string): Sample[] {
  const out: Sample[] = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const m = LINE.exec(line.replace(/ # \{.*$/, ''))
    if (m === null) throw new Error(`unparseable metrics line: ${line}`)
    const labels: Record<string, string> = {}
    for (const l of (m[2] ?? '').matchAll(LABEL)) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))
    out.push({ name: m[1], labels, value: m[3] === '+Inf' ? Infinity : Number(m[3]) })
  }
  return out
}

/** Sum of the samples named `name` whose labels include `match`. */
export function sumOf(samples: readonly Sample[], name: string, match: Record<string, string> = {}): number {
  let total = 0
  for (const s of samples) {
    if (s.name !== name) continue
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value
  }
  return total
}

/** The samples named `name` whose labels include `match`. */
export function select(samples: readonly Sample[], name: string, match: Record<string, string> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
}
