import { performance } from 'node:perf_hooks'
import type { ServerResponse } from 'node:http'
import { chunkText } from './schedule.ts'
import type { SimPlan } from './schedule.ts'

/**
 * Plays a plan on a response for any wire format: each chunk is written at its absolute offset
 * from the start (so timer lateness never accumulates; chunks due at once go out back to back),
 * then the format's ending, or its error event / a reset where the plan asks for one.
 */

export interface PlanFormat {
  /** Bytes of content chunk `index` carrying `text` (`tokens` simulated words). */
  chunk(index: number, text: string, tokens: number): string
  /** Bytes that end a complete stream (finish, usage, terminator). */
  end(): string
  /** Bytes of a provider error inside the stream (the response ends after them). */
  error(): string
}

/** Writes the plan's chunks in `format` at their planned times, then its end (or error / reset). */
export function playPlan(res: ServerResponse, plan: SimPlan, format: PlanFormat): void {
  const start = performance.now()
  let due = 0
  let i = 0
  let timer: NodeJS.Timeout | undefined
  res.once('close', () => clearTimeout(timer))
  const tick = (): void => {
    for (;;) {
      if (res.destroyed) return
      if (plan.resetAfter !== undefined && i >= plan.resetAfter) {
        res.socket?.destroy()
        return
      }
      if (plan.errorAfter !== undefined && i >= plan.errorAfter) {
        res.end(format.error())
        return
      }
      const chunk = plan.chunks[i]
      if (chunk === undefined) {
        res.end(format.end())
        return
      }
      const wait = due + chunk.afterMs - (performance.now() - start)
      if (wait > 0) {
        timer = setTimeout(tick, wait)
        return
      }
      due += chunk.afterMs
      res.write(format.chunk(i, chunkText(i, chunk.tokens), chunk.tokens))
      i++
    }
  }
  tick()
}

/** Total planned wait of a whole (non-streamed) answer, ms. */
export const planDuration = (plan: SimPlan): number => plan.chunks.reduce((t, c) => t + c.afterMs, 0)

/** Total planned output tokens. */
export const planTokens = (plan: SimPlan): number => plan.chunks.reduce((n, c) => n + c.tokens, 0)

/** The plan's whole text. */
export const planText = (plan: SimPlan): string => plan.chunks.map((c, i) => chunkText(i, c.tokens)).join('')

/** Answers after the plan's whole duration (a non-streamed request), unless the client left. */
export function answerLater(res: ServerResponse, plan: SimPlan, contentType: string, body: () => string): void {
  const timer = setTimeout(() => {
    if (res.destroyed) return
    const text = body()
    res.writeHead(200, { 'content-type': contentType, 'content-length': Buffer.byteLength(text) })
    res.end(text)
  }, planDuration(plan))
  res.once('close', () => clearTimeout(timer))
}

/** Reads the plan a request asks for: body `tokentap_sim` first, else the `x-tokentap-sim` header. */
export function requestedPlan<T>(header: string | string[] | undefined, bodyPlan: unknown): T | undefined {
  if (typeof bodyPlan === 'object' && bodyPlan !== null) return bodyPlan as T
  if (typeof header !== 'string') return undefined
  try {
    return JSON.parse(header) as T
  } catch {
    return undefined
  }
}
