import { hostname } from 'node:os'
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources'
import type { Resource } from '@opentelemetry/resources'

/** The resource of everything exported over OTLP: the OTEL_* variables over tokentap's defaults over the SDK's. */
export function tokentapResource(): Resource {
  return defaultResource()
    .merge(
      resourceFromAttributes({ 'service.name': 'tokentap', 'service.instance.id': `${hostname()}:${process.pid}` }),
    )
    .merge(detectResources({ detectors: [envDetector] }))
}
