import { parseArgs } from 'node:util'
import type { AddressInfo } from 'node:net'
import { buildSimulator } from './sim-app.ts'
import type { SimulatorConfig } from '../config/schema.ts'

/** The simulated model as its own process (the benchmark's upstream); prints `{"port":N}` once listening. */

const { values } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '0' },
    'ttft-ms': { type: 'string', default: '250' },
    'itl-ms': { type: 'string', default: '25' },
    'jitter-ms': { type: 'string', default: '0' },
    tokens: { type: 'string', default: '64' },
    seed: { type: 'string', default: '42' },
    model: { type: 'string', default: 'tokentap-sim-1' },
  },
  allowPositionals: false,
})

const config: SimulatorConfig = {
  ttft_ms: Number(values['ttft-ms']),
  itl_ms: Number(values['itl-ms']),
  jitter_ms: Number(values['jitter-ms']),
  tokens: Number(values.tokens),
  tokens_per_chunk: 1,
  burst_every: 0,
  burst_size: 1,
  stall_probability: 0,
  stall_ms: 0,
  seed: Number(values.seed),
  model: values.model as string,
  audio_ms_per_token: 300,
  audio_pace: 1.5,
}

const app = buildSimulator(config)
await app.listen({ host: values.host, port: Number(values.port) })
process.stdout.write(`${JSON.stringify({ port: (app.server.address() as AddressInfo).port })}\n`)
const stop = (): void => void app.close().then(() => process.exit(0))
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
