import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import pino from 'pino'
import { validateConfig } from '../../src/config/load-config.ts'
import { OtelTraces } from '../../src/metrics/otel/traces.ts'
import { TraceIdSource } from '../../src/record/trace-context.ts'
import { labRequest } from './lab-request.ts'
import { RecordPolicy } from '../../src/record/observations.ts'

/**
 * What a kept request's span costs in process: µs of CPU per span of a 3-chunk stream (all threads:
 * `OtelTraces.record()` builds its record in this one, the export's worker thread builds the SDK's
 * span, batches it, serialises it to OTLP protobuf and POSTs it to a sink in this process; "built"
 * is the time while records are handed over, "exported" the wait for the flush), and what the ids
 * and the sampling decision cost every request.
 * `npm run bench:lab -- trace-cost`. The whole-process figure at the default
 * sampling is the bench's traces round (`npm run bench -- --only traces`).
 */

async function main(): Promise<void> {
  let bytes = 0
  const sink = createServer((req, res) => {
    req.on('data', (c: Buffer) => {
      bytes += c.length
    })
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': '0' }).end())
  })
  await new Promise<void>((r) => sink.listen(0, '127.0.0.1', r))
  const url = `http://127.0.0.1:${(sink.address() as AddressInfo).port}/v1/traces`
  const config = validateConfig({ routes: [{ prefix: '/t', upstream: 'http://127.0.0.1:1' }], otel: { traces: { endpoint: url, sample: { ratio: 1 } } } })
  const traces = config.otel.traces as NonNullable<typeof config.otel.traces>
  let now = 1000
  const tracer = new OtelTraces({ config: config.otel, traces, logger: pino({ level: 'silent' }), stallSeconds: 1, now: () => now, serverOf: () => ({ address: '127.0.0.1', port: 1 }) })
  const policy = new RecordPolicy({ maxModelsPerRoute: 100, lengthBandLabel: false, genAi: true, traces: { ratio: 1, keep: traces.sample.keep, slowSeconds: 10 } })
  const ids = new TraceIdSource()
  const one = (): ReturnType<typeof labRequest> => {
    const sample = labRequest(now, 'r', 3, ids)
    now += 200
    return sample
  }
  const n = 20_000
  const requests = Array.from({ length: n }, one)
  const observed = requests.map(({ who, m }) => ({ who, o: policy.observe(who, m) }))
  // Warm-up: JIT, the exporter's first serialisation.
  for (let i = 0; i < 2000; i++) tracer.record(observed[i].o)
  await tracer.flush()
  const cpu = (): number => {
    const c = process.cpuUsage()
    return c.user + c.system
  }
  let building = 0
  let exporting = 0
  for (let i = 0; i < n; i += 1000) {
    const b0 = cpu()
    for (let j = i; j < i + 1000; j++) tracer.record(observed[j].o)
    const e0 = cpu()
    // The processor's queue holds 2,048 spans: export as the batches fill, as a loaded process would.
    await tracer.flush()
    exporting += cpu() - e0
    building += e0 - b0
  }
  const perSpan = (building + exporting) / n
  const h0 = process.cpuUsage()
  const m = 200_000
  for (let i = 0; i < m; i++) ids.start({})
  const h = process.cpuUsage(h0)
  const perIds = (h.user + h.system) / m
  await tracer.shutdown()
  sink.close()
  const us = (v: number): number => Number((v / n).toFixed(1))
  process.stderr.write(
    `[trace-cost] a kept request's span: ${perSpan.toFixed(1)} µs CPU (built ${us(building)}, exported ${us(exporting)}); a request's ids: ${perIds.toFixed(2)} µs (${(bytes / 1024).toFixed(0)} KiB exported)\n`,
  )
  process.stdout.write(
    `${JSON.stringify({ span_us: Number(perSpan.toFixed(1)), build_us: us(building), export_us: us(exporting), ids_us: Number(perIds.toFixed(2)), spans: n + 2000, export_bytes: bytes })}\n`,
  )
}

void main()
