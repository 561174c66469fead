/**
 * The package's entry: the Fastify plugin (default export), the @fastify/http-proxy helper, the service builder and types.
 *
 *   import tokentap, { tokentapReplyOptions } from 'tokentap'
 */
export { default, default as tokentap } from './plugin.ts'
export type { TokentapOptions, TokentapState, TokentapConfigOptions } from './plugin.ts'
export { tokentapReplyOptions } from './http-proxy.ts'
export type { HttpProxyTapOptions, TokentapReplyOptions } from './http-proxy.ts'
export { buildApp } from './app.ts'
export type { BuildOptions, Tokentap, TokentapApp } from './app.ts'
export { loadConfig, validateConfig } from './config/load-config.ts'
export type { Config, RouteConfig } from './config/schema.ts'
export type { Measurement, Outcome, TokenSource } from './timing/measurement.ts'
export { TokentapError } from './errors.ts'
export type { ErrorCode } from './errors.ts'
