/**
 * What the admin listener's `/metrics` reads: one process's own registry, or the cluster
 * primary's sum of its workers. Each says whether it can write OpenMetrics.
 */
export interface MetricsSource {
  /** `exposition(true)` writes OpenMetrics 1.0 (exemplars included) when a scraper asks for it. */
  readonly openMetrics: boolean
  /** The exposition in batches of buffers, each batch one socket write, as the scrape goes. */
  exposition(openMetrics: boolean): AsyncIterable<Buffer[]>
  /**
   * The protobuf exposition (native histograms, classic buckets beside them) when the source
   * can write it: served when the scraper's Accept prefers it (protobuf.ts, `wantsProtobuf`).
   */
  readonly protobuf?: (() => AsyncIterable<Buffer[]>) | undefined
  /**
   * The caller is done with a batch (its socket write's callback ran, or failed): a source that
   * reuses its buffers may fill them again. Optional; a batch never given back is collected.
   */
  recycle?(batch: readonly Buffer[]): void
}

/** Content types of the two text formats. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8'
export const OPENMETRICS_CONTENT_TYPE = 'application/openmetrics-text; version=1.0.0; charset=utf-8'
