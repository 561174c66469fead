import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { TokentapError } from '../errors.ts'

/**
 * The proxy's answer for a method and path no route owns: its own JSON error (OpenAI's shape, as
 * every other proxy error), status 404. Fastify's default names the URL, query included, and a
 * query can hold a key (`?key=AIza…`, Gemini's): SDKs put such bodies into exception messages.
 */
export function notFound(_request: FastifyRequest, reply: FastifyReply): void {
  const err = new TokentapError('TOKENTAP_ERR_NOT_FOUND')
  void reply.code(err.httpStatus).header('content-type', 'application/json').send(err.toBody())
}

/**
 * Fastify's `frameworkErrors`: a request target its router cannot decode (FST_ERR_BAD_URL) gets
 * the proxy's own 400, as any target it cannot forward (request-target.ts). Fastify's default
 * body quotes the whole URL, query and all.
 */
export function frameworkError(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const err = error.code === 'FST_ERR_BAD_URL' ? new TokentapError('TOKENTAP_ERR_BAD_TARGET', 'cannot be decoded') : new TokentapError('TOKENTAP_ERR_BAD_REQUEST', error.code)
  void reply.code(err.httpStatus).header('content-type', 'application/json').send(err.toBody())
}
