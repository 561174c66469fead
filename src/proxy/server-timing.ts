import type { Measurement } from '../timing/measurement.ts'

/**
 * The `Server-Timing` trailer (https://www.w3.org/TR/server-timing/): TTFT, ITL P99 and output
 * tokens, the same figures as the request's log line.
 */
export function serverTimingValue(m: Measurement): string {
  const parts: string[] = []
  const ms = (s: number): string => (Math.round(s * 1e6) / 1e3).toString()
  if (m.timing.ttft !== undefined) parts.push(`ttft;dur=${ms(m.timing.ttft)}`)
  if (m.itlP99 !== undefined) parts.push(`itl-p99;dur=${ms(m.itlP99)}`)
  parts.push(`tokens;desc=${m.outputTokens}`, `tokens-source;desc=${m.outputSource}`)
  return parts.join(', ')
}

/** Whether the client said it takes trailers (`TE: trailers`, RFC 9110 §10.1.4). */
export function acceptsTrailers(te: string | undefined): boolean {
  return te !== undefined && /(?:^|,)\s*trailers\s*(?:;|,|$)/i.test(te)
}
