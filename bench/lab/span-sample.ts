import type { RequestFacts } from '../../src/record/observations.ts'
import type { TraceIdSource } from '../../src/record/trace-context.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'

const ROUTE = { label: '/t', prefix: '/t', provider: 'openai', inFlight: 0 }

/** The request the span lab tools (trace-cost, trace-rate) record: a 3-chunk stream of 104 ms, its usage reported, a span id of its own. */
export function spanSample(now: number, id: string, ids: TraceIdSource): { who: RequestFacts; m: ReturnType<typeof measure> } {
  const log = new ChunkLog()
  for (let i = 0; i < 3; i++) log.add(now + 100 + i, 1, MarkKind.text, false)
  const m = measure({
    tReq: now,
    tEnd: now + 104,
    tHeaders: now + 50,
    statusCode: 200,
    failure: undefined,
    clientGone: false,
    chunks: log,
    summary: { usage: { input: 12, output: 3 } },
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
    trace: ids.start({}),
  }
  return { who, m }
}
