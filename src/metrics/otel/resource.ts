import { hostname } from 'node:os'
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources'
import type { Resource } from '@opentelemetry/resources'

/**
 * The resource of everything tokentap exports over OTLP (metrics and spans). Later resources win:
 * OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME over tokentap's defaults over the SDK's (telemetry.sdk.*).
 */
export function tokentapResource(): Resource {
  return defaultResource()
    .merge(resourceFromAttributes({ 'service.name': 'tokentap', 'service.instance.id': `${hostname()}:${process.pid}` }))
    .merge(detectResources({ detectors: [envDetector] }))
}
