import pino from 'pino'
import type { Logger } from 'pino'
import type { Config } from './config/schema.ts'

/**
 * The request log goes out in batches, off the request path: lines gather until 8 KiB or 50 ms,
 * then leave in one asynchronous write (a line per syscall cost as much as the rest of a short
 * request). Past 16 MiB waiting on a slow stdout, lines are dropped rather than grow memory.
 * pino writes out what is left when the process exits.
 */
const LOG_BATCH_BYTES = 8192
const LOG_FLUSH_MS = 50
const LOG_BUFFER_BYTES = 16 * 1024 * 1024

export function createLogger(config: Config): Logger {
  return pino({
    level: config.log.level,
    base: undefined,
    // Belt and braces: tokentap never logs request headers, but should anything carry them
    // (an error with a request attached), credentials are cut out.
    redact: {
      paths: ['req.headers.authorization', 'req.headers["x-api-key"]', 'req.headers["api-key"]', 'req.headers["x-goog-api-key"]', 'req.headers["proxy-authorization"]', 'req.headers.cookie', 'res.headers["set-cookie"]', 'headers.authorization', 'headers["x-api-key"]', 'headers.cookie'],
      censor: '[REDACTED]',
    },
  }, pino.destination({ dest: 1, sync: false, minLength: LOG_BATCH_BYTES, periodicFlush: LOG_FLUSH_MS, maxLength: LOG_BUFFER_BYTES }))
}
