/**
 * A strict parser of the OpenMetrics 1.0 text format
 * (https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md), for tests:
 * it throws on anything the specification forbids that tokentap could get wrong (blank lines,
 * a missing `# EOF`, counter families named with `_total`, samples outside their family, bad
 * escapes, exemplars where none may be, exemplars too long or outside their bucket, buckets that
 * are not cumulative or whose +Inf differs from `_count`).
 */

interface OmExemplar {
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
  readonly timestamp: number | undefined
}

interface OmSample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
  readonly exemplar: OmExemplar | undefined
}

export interface OmFamily {
  readonly name: string
  type: string
  help: string | undefined
  readonly samples: OmSample[]
}

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*'
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/
const NUMBER = /^(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?Inf|NaN)$/
const TYPES = new Set(['counter', 'gauge', 'histogram', 'gaugehistogram', 'stateset', 'info', 'summary', 'unknown'])
const SUFFIXES: Record<string, readonly string[]> = {
  counter: ['_total', '_created'],
  gauge: [''],
  histogram: ['_bucket', '_count', '_sum', '_created'],
  summary: ['', '_count', '_sum', '_created'],
  unknown: [''],
  info: ['_info'],
  stateset: [''],
  gaugehistogram: ['_bucket', '_gcount', '_gsum'],
}

function num(text: string, line: string): number {
  if (!NUMBER.test(text)) throw new Error(`not an OpenMetrics number '${text}' in: ${line}`)
  if (/Inf$/.test(text)) return text.startsWith('-') ? -Infinity : Infinity
  return Number(text)
}

/** Reads an escaped string up to its closing quote; only \\, \" and \n are escapes. */
function readQuoted(s: string, start: number, line: string): [string, number] {
  let out = ''
  let i = start
  for (;;) {
    const c = s[i]
    if (c === undefined || c === '\n') throw new Error(`unterminated label value in: ${line}`)
    if (c === '"') return [out, i + 1]
    if (c === '\\') {
      const e = s[i + 1]
      if (e === '\\') out += '\\'
      else if (e === '"') out += '"'
      else if (e === 'n') out += '\n'
      else throw new Error(`bad escape \\${e} in: ${line}`)
      i += 2
      continue
    }
    out += c
    i++
  }
}

/** Parses `{a="x",b="y"}` at `start`; returns labels and the index after `}`. */
function readLabels(s: string, start: number, line: string): [Record<string, string>, number] {
  const labels: Record<string, string> = {}
  let i = start + 1
  if (s[i] === '}') return [labels, i + 1]
  for (;;) {
    const eq = s.indexOf('=', i)
    if (eq < 0) throw new Error(`bad label set in: ${line}`)
    const name = s.slice(i, eq)
    if (!LABEL_NAME.test(name)) throw new Error(`bad label name '${name}' in: ${line}`)
    if (name in labels) throw new Error(`duplicate label '${name}' in: ${line}`)
    if (s[eq + 1] !== '"') throw new Error(`label value not quoted in: ${line}`)
    const [value, after] = readQuoted(s, eq + 2, line)
    labels[name] = value
    if (s[after] === '}') return [labels, after + 1]
    if (s[after] !== ',') throw new Error(`expected , or } in: ${line}`)
    i = after + 1
  }
}

function parseSample(line: string): OmSample {
  const m = new RegExp(`^(${NAME})`).exec(line)
  if (m === null) throw new Error(`bad sample line: ${line}`)
  let i = m[1].length
  let labels: Record<string, string> = {}
  if (line[i] === '{') [labels, i] = readLabels(line, i, line)
  if (line[i] !== ' ') throw new Error(`expected a space before the value in: ${line}`)
  const rest = line.slice(i + 1)
  const hash = rest.indexOf(' # ')
  const main = (hash < 0 ? rest : rest.slice(0, hash)).split(' ')
  if (main.length > 2 || main.some((p) => p === '')) throw new Error(`bad value/timestamp in: ${line}`)
  const value = num(main[0], line)
  if (main[1] !== undefined) num(main[1], line)
  let exemplar: OmExemplar | undefined
  if (hash >= 0) {
    const ex = rest.slice(hash + 3)
    if (ex[0] !== '{') throw new Error(`exemplar without label set in: ${line}`)
    const [exLabels, after] = readLabels(ex, 0, line)
    let chars = 0
    for (const [k, v] of Object.entries(exLabels)) chars += [...k].length + [...v].length
    if (chars > 128) throw new Error(`exemplar label set of ${chars} characters (max 128) in: ${line}`)
    const parts = ex.slice(after).split(' ')
    if (parts[0] !== '' || parts.length < 2 || parts.length > 3 || parts.slice(1).some((p) => p === '')) throw new Error(`bad exemplar in: ${line}`)
    exemplar = { labels: exLabels, value: num(parts[1], line), timestamp: parts[2] === undefined ? undefined : num(parts[2], line) }
  }
  return { name: m[1], labels, value, exemplar }
}

function checkHelp(text: string, line: string): string {
  let out = ''
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (c === '"') throw new Error(`unescaped double quote in HELP: ${line}`)
    if (c === '\\') {
      const e = text[++i]
      if (e === '\\') out += '\\'
      else if (e === '"') out += '"'
      else if (e === 'n') out += '\n'
      else throw new Error(`bad escape in HELP: ${line}`)
    } else out += c
  }
  return out
}

function familyOf(families: OmFamily[], sampleName: string): OmFamily | undefined {
  const f = families[families.length - 1]
  if (f === undefined) return undefined
  return (SUFFIXES[f.type] ?? ['']).some((s) => f.name + s === sampleName) ? f : undefined
}

function checkHistogram(f: OmFamily): void {
  const groups = new Map<string, { les: [number, number, OmExemplar | undefined][]; count?: number }>()
  for (const s of f.samples) {
    const { le, ...rest } = s.labels
    const key = JSON.stringify(rest)
    const g = groups.get(key) ?? { les: [] }
    groups.set(key, g)
    if (s.name.endsWith('_bucket')) {
      if (le === undefined) throw new Error(`${f.name}: bucket without le`)
      g.les.push([num(le, s.name), s.value, s.exemplar])
    } else if (s.name.endsWith('_count')) g.count = s.value
    if (s.exemplar !== undefined && !s.name.endsWith('_bucket')) throw new Error(`${f.name}: exemplar on ${s.name}`)
  }
  for (const [key, g] of groups) {
    let prevLe = -Infinity
    let prevCount = 0
    for (const [le, count, ex] of g.les) {
      if (!(le > prevLe)) throw new Error(`${f.name}${key}: le ${le} not ascending`)
      if (count < prevCount) throw new Error(`${f.name}${key}: buckets not cumulative at le ${le}`)
      if (ex !== undefined && !(ex.value <= le && ex.value > prevLe)) throw new Error(`${f.name}${key}: exemplar ${ex.value} outside bucket (${prevLe}, ${le}]`)
      prevLe = le
      prevCount = count
    }
    if (prevLe !== Infinity) throw new Error(`${f.name}${key}: no +Inf bucket`)
    if (g.count !== prevCount) throw new Error(`${f.name}${key}: +Inf ${prevCount} differs from _count ${g.count}`)
  }
}

/** Parses and validates an OpenMetrics exposition; throws with the offending line. */
export function parseOpenMetrics(text: string): OmFamily[] {
  if (!text.endsWith('# EOF\n') && !text.endsWith('# EOF')) throw new Error('the exposition does not end with # EOF')
  const lines = text.replace(/\n$/, '').split('\n')
  if (lines.pop() !== '# EOF') throw new Error('# EOF is not the last line')
  const families: OmFamily[] = []
  const seen = new Set<string>()
  const open = (name: string, line: string): OmFamily => {
    const last = families[families.length - 1]
    if (last !== undefined && last.name === name) {
      if (last.samples.length > 0) throw new Error(`metadata after samples: ${line}`)
      return last
    }
    if (seen.has(name)) throw new Error(`family ${name} is not contiguous: ${line}`)
    seen.add(name)
    const f: OmFamily = { name, type: 'unknown', help: undefined, samples: [] }
    families.push(f)
    return f
  }
  for (const line of lines) {
    if (line === '') throw new Error('a blank line (not allowed in OpenMetrics)')
    if (line.startsWith('#')) {
      const m = new RegExp(`^# (HELP|TYPE|UNIT) (${NAME})(?: (.*))?$`).exec(line)
      if (m === null) throw new Error(`bad metadata line: ${line}`)
      const f = open(m[2], line)
      if (m[1] === 'TYPE') {
        if (!TYPES.has(m[3] ?? '')) throw new Error(`unknown type: ${line}`)
        if (m[3] === 'counter' && f.name.endsWith('_total')) throw new Error(`counter family named with _total: ${line}`)
        f.type = m[3] as string
      } else if (m[1] === 'HELP') f.help = checkHelp(m[3] ?? '', line)
      continue
    }
    const s = parseSample(line)
    const f = familyOf(families, s.name)
    if (f === undefined) throw new Error(`sample outside its family: ${line}`)
    if (s.exemplar !== undefined && !(f.type === 'counter' && s.name.endsWith('_total')) && !s.name.endsWith('_bucket')) throw new Error(`exemplar not allowed here: ${line}`)
    if (f.type === 'counter' && s.name.endsWith('_total') && !(s.value >= 0)) throw new Error(`negative counter: ${line}`)
    f.samples.push(s)
  }
  for (const f of families) if (f.type === 'histogram') checkHistogram(f)
  return families
}
