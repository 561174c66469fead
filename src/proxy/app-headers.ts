/**
 * Headers the embedding app set on the reply before tokentap's handler took it over
 * (`reply.header()` from its hooks and plugins: @fastify/cors, @fastify/rate-limit, its own).
 * The handler hijacks the reply, so Fastify never writes them; the proxy writes them on the
 * proxied answer, merged with the upstream's by one rule (docs/embedding.md):
 *
 * - a name only the app set is added;
 * - `access-control-*` and `x-ratelimit-*`: the app's value replaces the upstream's (the
 *   browser must see one CORS policy, the app's; the limit the client is held to is the app's);
 * - `vary` and `set-cookie` (lists): both are kept;
 * - any other name both set: the upstream's is kept (it describes the answer it sent);
 * - names that frame the body or belong to the hop (content-length, content-type,
 *   content-encoding, transfer-encoding, connection, ...) are never taken from the app: the
 *   body is the upstream's.
 */

/** Names the app's reply never contributes: the upstream's body and this hop own them. */
const NOT_FROM_APP = new Set(['content-length', 'content-type', 'content-encoding', 'content-range', 'transfer-encoding', 'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'upgrade'])

/** Names both may carry: every value is kept. */
const LISTS = new Set(['vary', 'set-cookie'])

const appWins = (lower: string): boolean => lower.startsWith('access-control-') || lower.startsWith('x-ratelimit-')

type HeaderValues = Record<string, number | string | readonly string[] | undefined>

/** `reply.getHeaders()` as a flat raw list of what the proxied answer may take; undefined when nothing. */
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

/** The upstream's raw headers with the app's merged in by the rule above. */
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
  for (let i = 0; i < upstream.length; i += 2) if (!replaced.has(upstream[i].toLowerCase())) out.push(upstream[i], upstream[i + 1])
  for (const v of added) out.push(v)
  return out
}
