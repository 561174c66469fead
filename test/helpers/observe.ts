import { RecordPolicy } from '../../src/record/observations.ts'
import type { Observations, RecordPolicyOptions, RequestFacts } from '../../src/record/observations.ts'
import type { Measurement } from '../../src/timing/measurement.ts'

/** What a test says of a request besides its Measurement (labels, id, proxy figures); the rest defaults. */
export interface Who {
  readonly provider?: string
  readonly model?: string
  readonly route?: string
  readonly id?: string
  readonly method?: string
  readonly path?: string
  readonly responseModel?: string
  readonly concurrency?: number
  readonly usageInjected?: boolean
  readonly slo?: boolean
  readonly tReq?: number
  readonly overhead?: RequestFacts['overhead']
  /** The tenant label value (with a policy whose `tenant` is on). */
  readonly tenant?: string
}

const NO_OVERHEAD = { request: undefined, firstChunk: undefined, chunk: undefined }

/** A finished request's identity as the exchange would give it. */
function factsOf(who: Who = {}): RequestFacts {
  return {
    id: who.id ?? 'r',
    route: { label: who.route ?? '/r', slo: who.slo === true ? {} : undefined },
    provider: who.provider ?? 'openai',
    method: who.method ?? 'POST',
    path: who.path ?? '/v1/chat/completions',
    model: who.model ?? 'm',
    responseModel: who.responseModel,
    usageInjected: who.usageInjected ?? false,
    concurrency: who.concurrency ?? 1,
    tReq: who.tReq ?? 0,
    bytesIn: 0,
    bytesOut: 0,
    overhead: who.overhead ?? NO_OVERHEAD,
    extra: undefined,
    failureDetail: undefined,
    tenant: who.tenant,
  }
}

/** The recording policy as the plugin builds it, with room for any number of models. */
export function testPolicy(options: Partial<RecordPolicyOptions> = {}): RecordPolicy {
  return new RecordPolicy({ maxModelsPerRoute: 100_000, lengthBandLabel: false, genAi: true, ...options })
}

/** A Measurement's Observations under the policy (a fresh default one unless given). */
export function observationsOf(m: Measurement, who: Who = {}, policy: RecordPolicy = testPolicy()): Observations {
  return policy.observe(factsOf(who), m)
}
