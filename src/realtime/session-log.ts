import type { SeriesLabels as Labels } from '../record/observations.ts'
import type { SessionIdentity, SessionSummary } from './session.ts'

/** One log line per realtime session: no headers, no query (a Gemini key travels in it), no text. */

const MAX_PATH = 256
const cut = (s: string, n: number): string => (s.length > n ? `${s.slice(0, n)}…` : s)

export function sessionLogLine({
  who,
  labels,
  summary: s,
}: {
  who: SessionIdentity
  labels: Labels
  summary: SessionSummary
}): Record<string, unknown> {
  return {
    request_id: who.id,
    route: labels.route,
    provider: labels.provider,
    tenant: labels.tenant,
    model: who.model === undefined ? labels.model : cut(who.model, 256),
    path: cut(who.path, MAX_PATH),
    status: s.statusCode,
    outcome: s.outcome,
    error: s.failure,
    duration_ms: Math.round(s.duration * 1e6) / 1e3,
    responses: s.responses,
    close_code: s.close?.code,
    close_reason: s.close?.reason || undefined,
    closed_by: s.close?.from,
    ended_by: s.endedBy,
    bytes_from_client: s.bytesFromClient,
    bytes_from_upstream: s.bytesFromUpstream,
    messages_from_client: s.messagesFromClient,
    messages_from_upstream: s.messagesFromUpstream,
    unread_messages: s.unread || undefined,
    not_measured: s.parseError,
  }
}
