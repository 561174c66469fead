import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { TokentapError } from '../errors.ts'

/** Fastify's default 404 names the URL, and a query can hold a key (`?key=AIza…`) that SDKs put into exception messages. */
export function notFound(_request: FastifyRequest, reply: FastifyReply): void {
  const err = new TokentapError('TOKENTAP_ERR_NOT_FOUND')
  void reply.code(err.httpStatus).header('content-type', 'application/json').send(err.toBody())
}

/** A target Fastify cannot decode (FST_ERR_BAD_URL) gets the proxy's own 400, not a body quoting the URL. */
export function frameworkError(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const err =
    error.code === 'FST_ERR_BAD_URL'
      ? new TokentapError('TOKENTAP_ERR_BAD_TARGET', 'cannot be decoded')
      : new TokentapError('TOKENTAP_ERR_BAD_REQUEST', error.code)
  void reply.code(err.httpStatus).header('content-type', 'application/json').send(err.toBody())
}
