import type { ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { wantsOpenMetrics } from '../metrics/prometheus/openmetrics.ts'
import { PROTOBUF_CONTENT_TYPE, wantsProtobuf } from '../metrics/prometheus/protobuf.ts'
import { OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE } from '../metrics/prometheus/source.ts'
import type { MetricsSource } from '../metrics/prometheus/source.ts'
import { markScraped } from './linger.ts'

/** `GET /metrics`: text, OpenMetrics or protobuf exposition, as the scraper's Accept asks and the source can write. */

/**
 * Resolves when the response can take more ('drain' or the batch's write callback) or is gone.
 * Never on 'drain' alone: Node 22 can emit it inside uncork() and leave writableNeedDrain set.
 */
function writable(res: ServerResponse, written: Promise<void>): Promise<void> {
  return new Promise((resolve) => {
    if (res.destroyed) return resolve()
    const done = (): void => {
      res.off('drain', done)
      res.off('close', done)
      resolve()
    }
    res.on('drain', done)
    res.on('close', done)
    void written.then(done)
  })
}

export function metricsRoute(admin: FastifyInstance, source: MetricsSource): void {
  admin.get('/metrics', async (request, reply) => {
    markScraped(source)
    const accept = request.headers.accept
    const protobuf = source.protobuf !== undefined && wantsProtobuf(accept) ? source.protobuf : undefined
    const openMetrics = protobuf === undefined && source.openMetrics && wantsOpenMetrics(accept)
    const contentType =
      protobuf !== undefined ? PROTOBUF_CONTENT_TYPE : openMetrics ? OPENMETRICS_CONTENT_TYPE : PROMETHEUS_CONTENT_TYPE
    // Streamed at the scraper's pace; not gzipped: compression costs more CPU than the writes it saves (bench/scrape.ts).
    reply.hijack()
    const res = reply.raw
    const recycle = source.recycle?.bind(source)
    try {
      for await (const batch of protobuf !== undefined ? protobuf() : source.exposition(openMetrics)) {
        if (res.destroyed) break
        // The head goes out with the first batch: a source that fails before it still gets a 500.
        if (!res.headersSent) res.writeHead(200, { 'content-type': contentType, vary: 'accept' })
        // One writev, no copy; the last write's callback tells the source it may reuse the buffers.
        res.cork()
        let more = true
        const last = batch.length - 1
        let wrote: () => void = () => undefined
        const written = new Promise<void>((resolve) => (wrote = resolve))
        for (let i = 0; i < last; i++) more = res.write(batch[i])
        if (last >= 0) {
          more = res.write(batch[last], () => {
            recycle?.(batch)
            wrote()
          })
        } else wrote()
        res.uncork()
        if (!more) await writable(res, written)
      }
      if (!res.headersSent) res.writeHead(200, { 'content-type': contentType, vary: 'accept' })
      if (!res.destroyed) res.end()
    } catch (err) {
      request.log.error({ err }, 'scrape failed')
      if (!res.headersSent) {
        const body = JSON.stringify({ error: 'the scrape failed' })
        res.writeHead(503, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body)
        return
      }
      // The status is sent: cutting the body short is how the scraper learns of the failure.
      res.destroy()
    }
  })
}
