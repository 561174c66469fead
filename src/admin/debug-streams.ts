import type { FastifyInstance } from 'fastify'
import type { Exchange } from '../proxy/exchange.ts'

/** `GET /debug/streams`: the requests in flight, oldest first, bounded; figures and names only, never headers, credentials, text or query. */

/** At most this many streams are listed; the rest are counted in `omitted`. */
const MAX_STREAMS = 1000
/** Model names are cut to this length (the same as the `model` label). */
const MAX_MODEL = 128

interface StreamView {
  readonly request_id: string
  readonly route: string
  readonly provider: string
  readonly model: string | null
  readonly method: string
  /** Upstream status, null before response headers. */
  readonly status: number | null
  readonly age_ms: number
  readonly headers_ms: number | null
  readonly ttft_ms: number | null
  readonly chunks: number
  /** Σ k_j so far (tokenizer estimates until the provider's usage arrives at the end). */
  readonly tokens: number
  /** Time since the last content chunk (since t_req before the first): a stall in progress shows here. */
  readonly gap_ms: number
}

export interface StreamsSnapshot {
  readonly in_flight: number
  readonly shown: number
  readonly omitted: number
  readonly streams: readonly StreamView[]
}

const round = (ms: number): number => Math.round(ms * 1000) / 1000

/** One exchange's view at `now` (ms, the proxy's monotonic clock). */
function viewOf(ex: Exchange, now: number): StreamView {
  const log = ex.chunks
  const n = log.count
  let tokens = 0
  for (let i = 0; i < n; i++) tokens += log.tokens(i)
  const model = ex.requestModel
  return {
    request_id: ex.id,
    route: ex.route.label,
    provider: ex.provider,
    model: model === undefined ? null : model.slice(0, MAX_MODEL),
    method: ex.method,
    status: ex.statusCode === 0 ? null : ex.statusCode,
    age_ms: round(now - ex.tReq),
    headers_ms: ex.tHeaders === undefined ? null : round(ex.tHeaders - ex.tReq),
    ttft_ms: n === 0 ? null : round(log.at(0) - ex.tReq),
    chunks: n,
    tokens,
    gap_ms: round(now - (n === 0 ? ex.tReq : log.at(n - 1))),
  }
}

/** The streams in flight, oldest first, at most `limit` of them. */
export function snapshotStreams(active: ReadonlySet<Exchange>, now: number, limit = MAX_STREAMS): StreamsSnapshot {
  // The Set keeps insertion order, which is arrival order: the first `limit` are the oldest.
  const streams: StreamView[] = []
  for (const ex of active) {
    if (streams.length >= limit) break
    streams.push(viewOf(ex, now))
  }
  return { in_flight: active.size, shown: streams.length, omitted: active.size - streams.length, streams }
}

/** `GET /debug/streams`: what the source has in flight; 501 where it has no streams to show. */
export function debugStreamsRoute(
  admin: FastifyInstance,
  source: { readonly streams?: () => StreamsSnapshot | Promise<StreamsSnapshot> },
): void {
  admin.get('/debug/streams', async (_request, reply) => {
    if (source.streams === undefined)
      return reply.code(501).send({ error: '/debug/streams: this admin listener was given no requests in flight' })
    return reply.header('cache-control', 'no-store').send(await source.streams())
  })
}
