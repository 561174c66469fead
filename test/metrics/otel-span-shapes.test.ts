import t from 'tap'
import { spawnSync } from 'node:child_process'
import { pathToFileURL } from 'node:url'
import { distPath } from '../helpers/paths.ts'

t.test('the OTLP serialiser stays compiled across a full GC between two exports (its writer’s shape is kept)', async (t) => {
  // Spans go through SpanExport's batch processor to an exporter that serialises them as the OTLP
  // exporter does, then a full GC with no export running, four times. Before, the first GC threw the
  // serialiser's optimised code away ("weak objects": no writer was left alive) and the next exports
  // ran it unoptimised until V8 compiled it again.
  const script = `
    import { SpanExport } from ${JSON.stringify(pathToFileURL(distPath('src/metrics/otel/span-export.js')).href)}
    import { tokentapTraceSerializer } from ${JSON.stringify(pathToFileURL(distPath('src/metrics/otel/span-protobuf.js')).href)}
    let bytes = 0
    const exporter = {
      export(spans, done) { bytes += tokentapTraceSerializer.serializeRequest(spans).length; done({ code: 0 }) },
      shutdown: async () => {},
      forceFlush: async () => {},
    }
    const spans = new SpanExport(exporter, { failed() {}, recovered() {} })
    let n = 0
    const hex = (v, width) => v.toString(16).padStart(width, '0')
    for (let run = 0; run < 4; run++) {
      for (let i = 0; i < 500; i++, n++) {
        const attributes = { 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'm' + (n % 7), 'gen_ai.usage.output_tokens': n % 300, 'tokentap.ttft_seconds': n / 1000, 'tokentap.stalls': 0 }
        for (let a = 0; a < 30; a++) attributes['tokentap.a' + a] = a % 2 === 0 ? 'v' + a : a + 0.5
        spans.add({
          name: 'chat m', traceId: hex(n + 1, 32), spanId: hex(n + 1, 16), parent: undefined,
          startMs: 1e12 + n, endMs: 1e12 + n + 50, durationMs: 50, attributes,
          events: [{ name: 'gen_ai.first_token', timeMs: 1e12 + n + 10 }, { name: 'end', timeMs: 1e12 + n + 50, attributes: { 'tokentap.outcome': 'ok' } }],
          status: 0, statusMessage: undefined,
        })
      }
      await spans.flush()
      console.log('=== full GC')
      globalThis.gc()
    }
    await spans.shutdown()
    console.log('=== bytes ' + bytes)
  `
  // Compiled on the main thread (--no-concurrent-recompilation), so that the writer is optimized
  // before the first GC on every run, however busy the machine (a concurrent compile can finish
  // after it, and then there is no optimized code whose fate the GCs could show).
  const flags = ['--expose-gc', '--trace-opt', '--trace-deopt', '--no-concurrent-recompilation']
  const run = spawnSync(process.execPath, [...flags, '--input-type=module', '-e', script], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  })
  t.equal(run.status, 0, run.stderr)
  t.match(run.stdout, /=== bytes [1-9]\d+/, 'the spans were serialised')
  const [before, ...after] = run.stdout.split('=== full GC')
  const writer =
    /<SharedFunctionInfo (varint32|varint|byte|string|bytes|hexId|hrTime|double|fixed32|ensure|start|finish|writeAttributes|writeSpan|writeSpanHead|writeSpanTail|writeEvent|keyField|count|time)>/
  // "completed compiling … (target TURBOFAN)" on Node 20 and 22, "(target TURBOFAN_JS)" on 26.
  t.match(before, /completed (compiling|optimizing) .*<JSFunction (writeAttributes|writeSpan|varint32|string) .*target TURBOFAN/, 'the writer was compiled before the first GC')
  // "reason: weak objects" up to Node 22, "reason: embedded weak objects cleared" on Node 26.
  const thrown = after
    .join('')
    .split('\n')
    .filter((line) => /reason: (embedded )?weak objects/.test(line) && writer.test(line))
  t.same(thrown, [], 'no optimised serialiser code thrown away at a GC')
})
