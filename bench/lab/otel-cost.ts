import pino from 'pino'
import { OtelMetrics } from '../../src/metrics/otel/otel-metrics.ts'
import { labRequest } from './lab-request.ts'
import { RecordPolicy } from '../../src/record/observations.ts'

/**
 * What `OtelMetrics.record()` costs in process: µs of CPU per finished stream of 3 and of 100
 * one-token chunks (the hot-path part of the OpenTelemetry export; issue 15).
 * `npm run bench:lab -- otel-cost`. The whole-process figure, exports included
 * (OTel on against off, CPU per short request), is the bench's OTel round:
 * `npm run bench -- --only otel` (bench/otel-phase.ts).
 */

/** CPU µs per `OtelMetrics.record()` of a finished stream of `chunks` one-token chunks 1 ms apart. */
function recordCost(chunks: number): { usPerRecord: number; records: number } {
  const otel = new OtelMetrics({ config: { endpoint: 'http://127.0.0.1:9', headers: {}, interval_ms: 3_600_000 }, logger: pino({ level: 'silent' }), env: {} })
  // The policy's Observations are made once per request for every sink: only the OTel map is timed.
  const policy = new RecordPolicy({ maxModelsPerRoute: 100, lengthBandLabel: false, genAi: true })
  const ms = Array.from({ length: 1000 }, () => {
    const { who, m } = labRequest(0, 'r', chunks)
    return policy.observe(who, m)
  })
  const n = Math.round(600_000 / (chunks + 5))
  for (let i = 0; i < n / 10; i++) otel.record(ms[i % ms.length])
  const c0 = process.cpuUsage()
  for (let i = 0; i < n; i++) otel.record(ms[i % ms.length])
  const c = process.cpuUsage(c0)
  void otel.shutdown()
  return { usPerRecord: (c.user + c.system) / n, records: n }
}

async function main(): Promise<void> {
  const micro = recordCost(3)
  const long = recordCost(100)
  process.stderr.write(`[otel-cost] OtelMetrics.record(): ${micro.usPerRecord.toFixed(2)} µs CPU per 3-chunk request, ${long.usPerRecord.toFixed(2)} µs per 100-chunk one\n`)
  process.stdout.write(
    `${JSON.stringify({ record_us: { chunks_3: Number(micro.usPerRecord.toFixed(2)), chunks_100: Number(long.usPerRecord.toFixed(2)) }, records: { chunks_3: micro.records, chunks_100: long.records } })}\n`,
  )
}

void main()
