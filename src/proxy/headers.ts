/**
 * End-to-end headers pass in order, duplicates kept; hop-by-hop ones and those `Connection` names
 * are dropped (RFC 9110 §7.6.1, https://www.rfc-editor.org/rfc/rfc9110#section-7.6.1).
 */

const HOP_BY_HOP = new Set([
  'connection',
  'proxy-connection',
  'keep-alive',
  'te',
  'transfer-encoding',
  'upgrade',
  'trailer',
])

/** Request headers the proxy sets itself: Host comes from the upstream's origin; undici does not take Expect. */
const REQUEST_OWN = new Set(['host', 'expect'])

/** Not hop-by-hop already; almost every Connection header says only `keep-alive`, which lists none. */
function connectionTokens(raw: readonly string[]): Set<string> | undefined {
  let tokens: Set<string> | undefined
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].length === 10 && raw[i].toLowerCase() === 'connection') {
      const value = raw[i + 1]
      if (value.length === 10 && value.toLowerCase() === 'keep-alive') continue
      for (const t of value.split(',')) {
        const name = t.trim().toLowerCase()
        if (name && !HOP_BY_HOP.has(name)) {
          tokens ??= new Set()
          tokens.add(name)
        }
      }
    }
  }
  return tokens
}

/** A name of any other length goes through without being lower-cased (most of a request's headers). */
const DROPPABLE_LENGTH = new Uint8Array(18)
for (const name of [...HOP_BY_HOP, ...REQUEST_OWN]) DROPPABLE_LENGTH[name.length] = 1

/** The headers of `raw` but those dropped: hop-by-hop ones, the ones Connection lists, and `drop` (a subset of REQUEST_OWN). */
function filter(raw: readonly string[], drop: ReadonlySet<string>): string[] {
  const listed = connectionTokens(raw)
  // Lengths of the listed names (bit n: length n; bit 31: 31 or longer), to lower-case only names that may be one.
  let listedLengths = 0
  if (listed !== undefined) for (const name of listed) listedLengths |= 1 << Math.min(name.length, 31)
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]
    const n = name.length
    if ((n < DROPPABLE_LENGTH.length && DROPPABLE_LENGTH[n] === 1) || (listedLengths & (1 << Math.min(n, 31))) !== 0) {
      const lower = name.toLowerCase()
      if (HOP_BY_HOP.has(lower) || drop.has(lower) || listed?.has(lower)) continue
    }
    out.push(name, raw[i + 1])
  }
  return out
}

const NONE: ReadonlySet<string> = new Set()

export function upstreamRequestHeaders(rawHeaders: readonly string[]): string[] {
  return filter(rawHeaders, REQUEST_OWN)
}

export function clientResponseHeaders(rawHeaders: readonly (Buffer | string)[]): string[] {
  const raw = rawHeaders.map((h) => (typeof h === 'string' ? h : h.toString('latin1')))
  return filter(raw, NONE)
}

export function rawHeader(raw: readonly string[], lowerName: string): string | undefined {
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].length === lowerName.length && raw[i].toLowerCase() === lowerName) return raw[i + 1]
  }
  return undefined
}

export function withoutHeader(raw: readonly string[], lowerName: string): string[] {
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) if (raw[i].toLowerCase() !== lowerName) out.push(raw[i], raw[i + 1])
  return out
}
