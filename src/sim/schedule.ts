import type { SimulatorConfig } from '../config/schema.ts'
import { createRng } from './rng.ts'

/** What the simulated model will send for one request (first wait, then gaps and token counts); seeded. */

interface SimChunk {
  /** Wait before this chunk, ms (for the first chunk: the TTFT). */
  readonly afterMs: number
  readonly tokens: number
}

export interface SimPlan {
  readonly chunks: readonly SimChunk[]
  /** Answer with this HTTP status and an OpenAI error body instead of a completion. */
  readonly status?: number
  /** Send an OpenAI error event after this many chunks (a provider error inside a 200 stream). */
  readonly errorAfter?: number
  /** Destroy the connection after this many chunks (an upstream reset mid-stream). */
  readonly resetAfter?: number
}

/** A plan a request can ask for explicitly (body `tokentap_sim` or header `x-tokentap-sim`). */
export interface SimPlanRequest {
  ttft_ms?: number
  /** Explicit chunks: `[gap_ms, tokens]` pairs after the first; the first uses ttft_ms. */
  chunks?: [number, number][]
  /** First chunk's tokens (with `chunks`), default 1. */
  first_tokens?: number
  status?: number
  error_after?: number
  reset_after?: number
  seed?: number
  /** A slow provider: every wait of the plan (TTFT, gaps, stalls) this many times longer (1 – 1000). */
  slow?: number
}

const clampInt = (v: unknown, lo: number, hi: number, fallback: number): number =>
  typeof v === 'number' && Number.isFinite(v) ? Math.min(hi, Math.max(lo, Math.round(v))) : fallback
const clampMs = (v: unknown, fallback: number): number =>
  typeof v === 'number' && Number.isFinite(v) ? Math.min(600_000, Math.max(0, v)) : fallback

/** Builds a plan from the route's simulator settings, the request's `max_tokens` and any explicit request. */
export function planFor(
  cfg: SimulatorConfig,
  maxTokens: number | undefined,
  request: SimPlanRequest | undefined,
  seq: number,
): SimPlan {
  const extra = {
    status: request?.status === undefined ? undefined : clampInt(request.status, 100, 599, 500),
    errorAfter: request?.error_after === undefined ? undefined : clampInt(request.error_after, 0, 1e6, 0),
    resetAfter: request?.reset_after === undefined ? undefined : clampInt(request.reset_after, 0, 1e6, 0),
  }
  const slow =
    typeof request?.slow === 'number' && Number.isFinite(request.slow) ? Math.min(1000, Math.max(1, request.slow)) : 1
  const slowed = (chunks: SimChunk[]): SimChunk[] =>
    slow === 1 ? chunks : chunks.map((c) => ({ afterMs: c.afterMs * slow, tokens: c.tokens }))
  if (request?.chunks !== undefined && Array.isArray(request.chunks)) {
    const chunks: SimChunk[] = [
      { afterMs: clampMs(request.ttft_ms, cfg.ttft_ms), tokens: clampInt(request.first_tokens, 1, 10_000, 1) },
    ]
    for (const pair of request.chunks.slice(0, 100_000)) {
      if (!Array.isArray(pair)) continue
      chunks.push({ afterMs: clampMs(pair[0], cfg.itl_ms), tokens: clampInt(pair[1], 1, 10_000, 1) })
    }
    return { chunks: slowed(chunks), ...extra }
  }
  const rng = createRng((request?.seed ?? cfg.seed) + seq * 7919)
  const total = clampInt(maxTokens, 1, 1_000_000, cfg.tokens)
  const chunks: SimChunk[] = []
  let sent = 0
  let i = 0
  while (sent < total) {
    const burst = cfg.burst_every > 0 && i > 0 && i % cfg.burst_every === 0
    const tokens = Math.min(total - sent, burst ? cfg.burst_size : cfg.tokens_per_chunk)
    let afterMs: number
    if (i === 0) afterMs = cfg.ttft_ms
    else if (cfg.stall_probability > 0 && rng() < cfg.stall_probability) afterMs = cfg.stall_ms
    else afterMs = Math.max(0, cfg.itl_ms * (burst ? cfg.burst_size : 1) + (rng() * 2 - 1) * cfg.jitter_ms)
    chunks.push({ afterMs: i === 0 ? Math.max(0, afterMs + (rng() * 2 - 1) * cfg.jitter_ms) : afterMs, tokens })
    sent += tokens
    i++
  }
  return { chunks: slowed(chunks), ...extra }
}

/** One token each in o200k_base and cl100k_base (a test checks), so k words are exactly k tokens. */
export const WORDS = [
  ' the',
  ' of',
  ' and',
  ' to',
  ' a',
  ' in',
  ' is',
  ' that',
  ' for',
  ' it',
  ' with',
  ' as',
  ' was',
  ' on',
  ' be',
  ' at',
  ' by',
  ' this',
  ' not',
  ' are',
  ' but',
  ' from',
  ' or',
  ' have',
  ' an',
  ' they',
  ' which',
  ' one',
  ' you',
  ' were',
  ' all',
  ' there',
  ' would',
  ' their',
  ' we',
  ' been',
  ' has',
  ' when',
  ' who',
  ' will',
  ' more',
  ' no',
  ' if',
  ' out',
  ' so',
  ' what',
  ' up',
  ' its',
  ' about',
  ' into',
  ' than',
  ' them',
  ' can',
  ' only',
  ' other',
  ' new',
  ' some',
  ' could',
  ' time',
  ' these',
  ' two',
  ' may',
  ' then',
  ' do',
] as const

/** The text of chunk `index` with `tokens` words. */
export function chunkText(index: number, tokens: number): string {
  let s = ''
  for (let i = 0; i < tokens; i++) s += WORDS[(index * 7 + i * 13) % WORDS.length]
  return s
}
