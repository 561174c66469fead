import { monotonicNow } from '../clock.ts'
import type { ServerResponse } from 'node:http'
import { chunkText } from './schedule.ts'
import type { SimPlan } from './schedule.ts'

/** Plays a simulated answer's plan: the format says what bytes to write (`StreamFormat`), the player says when. */

/** One simulated request, as a format needs it to write its answer. */
export interface SimRequest {
  /** The request's JSON body (an empty object when there is none). */
  readonly body: Record<string, unknown>
  /** Path and query as the simulator received them. */
  readonly url: string
  /** The simulator's configured model name, for requests that name none. */
  readonly defaultModel: string
  /** A number unique to this request in this simulator (for ids). */
  readonly seq: number
}

/** The bytes of one streamed answer, event by event. */
export interface StreamFormat {
  readonly contentType: string
  /** Written with the headers, before the wait for the first token (may be empty). */
  head(): string
  /** Content chunk `index` of the plan with its `text`; `last` when no chunk follows. */
  content(index: number, text: string, last: boolean): string
  /** A provider error inside the stream (the plan's `error_after`); the response ends after it. */
  error(): string
  /** After the last chunk. */
  tail(): string
}

/** Output tokens the plan sends in all. */
export function plannedTokens(plan: SimPlan): number {
  let n = 0
  for (const c of plan.chunks) n += c.tokens
  return n
}

/** The whole answer's text: every chunk's words, in order. */
export function plannedText(plan: SimPlan): string {
  return plan.chunks.map((c, i) => chunkText(i, c.tokens)).join('')
}

/** The simulator is no tokenizer: a fixed 4 characters a token gives a plausible input count. */
export function promptTokensOf(value: unknown): number {
  const text = JSON.stringify(value ?? '') ?? ''
  return Math.max(1, Math.ceil(text.length / 4))
}

/** Answers with a non-2xx status and a JSON error body. */
export function sendError(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/** Sends a whole (non-streamed) JSON answer once the plan's whole generation time has passed. */
export function sendWhole(res: ServerResponse, plan: SimPlan, answer: () => unknown): void {
  const waitMs = plan.chunks.reduce((t, c) => t + c.afterMs, 0)
  const timer = setTimeout(() => {
    if (res.destroyed) return
    const json = JSON.stringify(answer())
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) })
    res.end(json)
  }, waitMs)
  res.once('close', () => clearTimeout(timer))
}

/**
 * Streams the plan, backpressured like a provider behind TCP: nothing is written while the socket's buffer
 * is full, so a stream to a stopped reader holds neither the simulator's memory nor its loop.
 */
export function playStream(res: ServerResponse, plan: SimPlan, format: StreamFormat): void {
  res.writeHead(200, { 'content-type': format.contentType, 'cache-control': 'no-cache', connection: 'keep-alive' })
  // res.write corks the socket until the next tick: a destroy in the same tick would drop the last chunk.
  let unflushed = 0
  let resetWhenFlushed = false
  const flushed = (): void => {
    unflushed--
    if (resetWhenFlushed && unflushed === 0) res.socket?.destroy()
  }
  /** Writes `text`; false when the socket's buffer is full (wait for 'drain' before the next). */
  const write = (text: string): boolean => {
    unflushed++
    return res.write(text, flushed)
  }
  const head = format.head()
  let headFits = true
  if (head.length > 0) headFits = write(head)
  else res.flushHeaders()

  const start = monotonicNow()
  let due = 0
  let i = 0
  let timer: NodeJS.Timeout | undefined
  let resume: NodeJS.Immediate | undefined
  // 'drain' can come in the same tick as the filling write: resuming next turn lets I/O and timers run.
  const drained = (): void => {
    resume = setImmediate(tick)
  }
  res.once('close', () => {
    clearTimeout(timer)
    clearImmediate(resume)
    res.off('drain', drained)
  })
  const tick = (): void => {
    for (;;) {
      if (res.destroyed) return
      if (plan.resetAfter !== undefined && i >= plan.resetAfter) {
        if (unflushed === 0) res.socket?.destroy()
        else resetWhenFlushed = true
        return
      }
      if (plan.errorAfter !== undefined && i >= plan.errorAfter) {
        res.end(format.error())
        return
      }
      const chunk = plan.chunks[i]
      if (chunk === undefined) {
        res.end(format.tail())
        return
      }
      // Absolute offsets from the start, so timer lateness never accumulates.
      const wait = due + chunk.afterMs - (monotonicNow() - start)
      if (wait > 0) {
        timer = setTimeout(tick, wait)
        return
      }
      due += chunk.afterMs
      const fits = write(format.content(i, chunkText(i, chunk.tokens), i === plan.chunks.length - 1))
      i++
      if (!fits) {
        res.once('drain', drained)
        return
      }
    }
  }
  if (headFits) tick()
  else res.once('drain', drained)
}
