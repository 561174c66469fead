import type { RequestFacts } from '../../src/record/observations.ts'
import type { TraceIdSource } from '../../src/record/trace-context.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'

const ROUTE = { label: '/t', prefix: '/t', provider: 'openai', inFlight: 0 }

/**
 * The request the OTel lab tools (otel-cost, trace-cost, trace-rate) record: a stream of `chunks`
 * one-token chunks 1 ms apart from 100 ms on, its usage reported, and with `ids` a span of its own.
 */
export function labRequest(now: number, id: string, chunks: number, ids?: TraceIdSource): { who: RequestFacts; m: ReturnType<typeof measure> } {
  const log = new ChunkLog()
  for (let i = 0; i < chunks; i++) log.add(now + 100 + i, 1, MarkKind.text, false)
  const m = measure({
    tReq: now,
    tEnd: now + 101 + chunks,
    tHeaders: now + 50,
    statusCode: 200,
    failure: undefined,
    clientGone: false,
    chunks: log,
    summary: { usage: { input: 12, output: chunks } },
    stallSeconds: 1,
  })
  const who: RequestFacts = {
    id,
    route: ROUTE,
    provider: 'openai',
    tenant: undefined,
    method: 'POST',
    path: '/v1/chat/completions',
    model: 'bench-model',
    responseModel: 'bench-model',
    usageInjected: false,
    concurrency: 1,
    bytesIn: 100,
    bytesOut: 1000,
    tReq: now,
    overhead: { request: undefined, firstChunk: undefined, chunk: undefined },
    extra: undefined,
    failureDetail: undefined,
    trace: ids?.start({}),
  }
  return { who, m }
}
