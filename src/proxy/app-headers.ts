/**
 * Headers the embedding app set before the handler hijacked the reply (@fastify/cors,
 * @fastify/rate-limit...), which Fastify would then never write: merged into the proxied answer by
 * the rule in docs/embedding.md. The app wins for `access-control-*` and `x-ratelimit-*` (one
 * CORS policy, the limit the client is held to), the upstream for any other name both set.
 */

/** The upstream's body and this hop own them. */
const NOT_FROM_APP = new Set([
  'content-length',
  'content-type',
  'content-encoding',
  'content-range',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'upgrade',
])

const LISTS = new Set(['vary', 'set-cookie'])

const appWins = (lower: string): boolean => lower.startsWith('access-control-') || lower.startsWith('x-ratelimit-')

type HeaderValues = Record<string, number | string | readonly string[] | undefined>

/** Undefined when nothing. */
export function appHeadersOf(headers: HeaderValues): string[] | undefined {
  let out: string[] | undefined
  for (const name in headers) {
    const value = headers[name]
    if (value === undefined || NOT_FROM_APP.has(name.toLowerCase())) continue
    out ??= []
    if (Array.isArray(value)) for (const v of value) out.push(name, String(v))
    else out.push(name, String(value))
  }
  return out
}

export function withAppHeaders(upstream: readonly string[], app: readonly string[]): string[] {
  const upstreamNames = new Set<string>()
  for (let i = 0; i < upstream.length; i += 2) upstreamNames.add(upstream[i].toLowerCase())
  const replaced = new Set<string>()
  const added: string[] = []
  for (let i = 0; i < app.length; i += 2) {
    const lower = app[i].toLowerCase()
    if (!upstreamNames.has(lower) || LISTS.has(lower)) added.push(app[i], app[i + 1])
    else if (appWins(lower)) {
      replaced.add(lower)
      added.push(app[i], app[i + 1])
    }
  }
  if (added.length === 0) return upstream as string[]
  const out: string[] = []
  for (let i = 0; i < upstream.length; i += 2)
    if (!replaced.has(upstream[i].toLowerCase())) out.push(upstream[i], upstream[i + 1])
  for (const v of added) out.push(v)
  return out
}
