import type { Logger } from 'pino'
import type { MetricsSource } from '../metrics/prometheus/source.ts'

/** The metrics sources whose `/metrics` has answered at least once: a scraper is there to come back. */
const scraped = new WeakSet<MetricsSource>()

/** `/metrics` served this source (metrics-route.ts). */
export function markScraped(source: MetricsSource): void {
  scraped.add(source)
}

/**
 * After a drain, keeps `/metrics` up for `server.drain_linger_seconds` so the next scrape reads the
 * drain's figures; only when something has scraped, or nobody would come.
 */
export async function lingerForScrape(source: MetricsSource, seconds: number, logger: Logger): Promise<void> {
  if (seconds <= 0 || !scraped.has(source)) return
  logger.info({ linger_seconds: seconds }, 'lingering: /metrics answers until the next scrape')
  await new Promise<void>((resolve) => setTimeout(resolve, seconds * 1000))
}
