import { Counter } from '../../src/metrics/prometheus/counter.ts'
import { CollectedGauge } from '../../src/metrics/prometheus/gauge.ts'
import { Histogram } from '../../src/metrics/prometheus/histogram.ts'
import type { NativeOptions } from '../../src/metrics/prometheus/histogram.ts'
import type { OwnMetric } from '../../src/metrics/prometheus/registry.ts'

/** The three kinds of family a cluster merge handles: a histogram, a counter and a collected gauge. */
export interface Families {
  readonly latency: Histogram
  readonly requests: Counter
  readonly inFlight: CollectedGauge
  readonly all: OwnMetric[]
}

/** One process's (or one worker's) families; the gauge reads `gauge` (route → in flight) when collected. */
export function families(native: NativeOptions | undefined, gauge: Map<string, number>): Families {
  const latency = new Histogram({ name: 'llm_time_to_first_token_seconds', help: 'TTFT.', labelNames: ['route', 'model'], buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5], native })
  const requests = new Counter({ name: 'llm_requests_total', help: 'Requests.', labelNames: ['route', 'outcome'] })
  const inFlight = new CollectedGauge({
    name: 'llm_requests_in_flight',
    help: 'In flight.',
    labelNames: ['route'],
    collect: (add) => {
      for (const [route, n] of gauge) add([route], n)
    },
  })
  return { latency, requests, inFlight, all: [latency, requests, inFlight] }
}
