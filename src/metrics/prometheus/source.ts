/** What the admin listener's `/metrics` reads: one process's registry, or the cluster primary's sum of its workers. */
export interface MetricsSource {
  /** `exposition(true)` writes OpenMetrics 1.0 (exemplars included) when a scraper asks for it. */
  readonly openMetrics: boolean
  /** The exposition in batches of buffers, each batch one socket write, as the scrape goes. */
  exposition(openMetrics: boolean): AsyncIterable<Buffer[]>
  /** The protobuf exposition, when the source can write it (served when the scraper prefers it: `wantsProtobuf`). */
  readonly protobuf?: (() => AsyncIterable<Buffer[]>) | undefined
  /** The caller is done with a batch, so a source may reuse its buffers; optional. */
  recycle?(batch: readonly Buffer[]): void
}

/** Content types of the two text formats. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8'
export const OPENMETRICS_CONTENT_TYPE = 'application/openmetrics-text; version=1.0.0; charset=utf-8'
