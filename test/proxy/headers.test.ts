import fc from 'fast-check'
import t from 'tap'
import { clientResponseHeaders, upstreamRequestHeaders } from '../../src/proxy/headers.ts'

// Hop-by-hop filtering skips lower-casing names that cannot be dropped: it must drop exactly what
// a plain filter drops (RFC 9110 §7.6.1: Connection, the names it lists, the hop-by-hop fields).

const HOP = ['connection', 'proxy-connection', 'keep-alive', 'te', 'transfer-encoding', 'upgrade', 'trailer']

/** The rule, written plainly: every name lower-cased and looked up. */
function reference(raw: readonly string[], own: readonly string[]): string[] {
  const listed = new Set<string>()
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].toLowerCase() === 'connection') for (const token of raw[i + 1].split(',')) if (token.trim() !== '') listed.add(token.trim().toLowerCase())
  }
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) {
    const lower = raw[i].toLowerCase()
    if (!HOP.includes(lower) && !own.includes(lower) && !listed.has(lower)) out.push(raw[i], raw[i + 1])
  }
  return out
}

const caseOf = (name: string, mask: number): string => [...name].map((c, i) => ((mask >> (i % 16)) & 1 ? c.toUpperCase() : c)).join('')
const NAMES = [...HOP, 'host', 'expect', 'content-type', 'x-secret', 'close', 'a', 'x-a-very-long-header-name-of-40-characters', 'authorization', 'x-request-id', 'set-cookie']
const name = fc.tuple(fc.constantFrom(...NAMES), fc.nat()).map(([n, mask]) => caseOf(n, mask))
const connectionValue = fc.array(fc.tuple(name, fc.constantFrom('', ' ', '  ')), { maxLength: 4 }).map((tokens) => tokens.map(([n, pad]) => `${pad}${n}${pad}`).join(','))
const header = fc.oneof(
  fc.tuple(name, fc.constantFrom('v', 'keep-alive', 'x')),
  fc.tuple(fc.constantFrom('connection', 'Connection', 'CONNECTION'), fc.oneof(connectionValue, fc.constantFrom('keep-alive', 'Keep-Alive', 'close'))),
)
const headers = fc.array(header, { maxLength: 12 }).map((pairs) => pairs.flat())

t.test('request headers: exactly the hop-by-hop ones, the ones Connection names, Host and Expect are dropped', async (t) => {
  fc.assert(
    fc.property(headers, (raw) => JSON.stringify(upstreamRequestHeaders(raw)) === JSON.stringify(reference(raw, ['host', 'expect']))),
    { numRuns: 2000, seed: 3 },
  )
  t.pass('2000 header lists agree')
})

t.test('response headers: exactly the hop-by-hop ones and the ones Connection names are dropped', async (t) => {
  fc.assert(
    fc.property(headers, (raw) => JSON.stringify(clientResponseHeaders(raw.map((h) => Buffer.from(h, 'latin1')))) === JSON.stringify(reference(raw, []))),
    { numRuns: 2000, seed: 5 },
  )
  t.pass('2000 header lists agree')
})
