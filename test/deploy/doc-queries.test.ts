import t from 'tap'
import type { Test } from 'tap'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { repoPath } from '../helpers/paths.ts'
import { findTool, run } from '../helpers/tools.ts'

/**
 * The PromQL the README and docs/metrics.md give under a `# title` comment, evaluated by promtool
 * on series shaped as tokentap exports them: the example returns what its title says.
 */

/** Every query in the file's promql blocks that follows the comment `# title` (one line each). */
function queriesTitled(file: string, title: string): string[] {
  const text = readFileSync(repoPath(file), 'utf8')
  const out: string[] = []
  for (const block of text.matchAll(/```promql\n([\s\S]*?)```/g)) {
    const lines = block[1].split('\n')
    for (let i = 0; i < lines.length - 1; i++) if (lines[i].trim() === `# ${title}`) out.push(lines[i + 1].trim())
  }
  return out
}

/** Runs promtool's unit test of `expr` over `series` at 10m, expecting `samples`. */
function promtoolEvaluates(
  t: Test,
  expr: string,
  series: readonly { readonly series: string; readonly values: string }[],
  samples: readonly { readonly labels: string; readonly value: number }[],
): void {
  const promtool = findTool(t, 'promtool')
  if (promtool === undefined) return
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-doc-query-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: [] }))
  writeFileSync(
    join(dir, 'test.yaml'),
    stringify({ rule_files: ['rules.yaml'], evaluation_interval: '1m', tests: [{ interval: '1m', input_series: series, promql_expr_test: [{ expr, eval_time: '10m', exp_samples: samples }] }] }),
  )
  const r = run(promtool, ['test', 'rules', 'test.yaml'], undefined, dir)
  t.equal(r.status, 0, `promtool evaluates ${expr}`, { output: r.output })
}

const ttftBucket = (band: string, le: string, perMinute: number) => ({
  series: `llm_time_to_first_token_seconds_bucket{job="tokentap",instance="a",provider="openai",model="m",route="/openai",input_length_band="${band}",le="${le}"}`,
  values: `0+${perMinute}x10`,
})

t.test('"TTFT p99 by prompt band" gives each band its own P99: short prompts in the first bucket, long ones above a second', async (t) => {
  const queries = [...queriesTitled('README.md', 'TTFT p99 by prompt band'), ...queriesTitled('docs/metrics.md', 'TTFT p99 by prompt band')]
  t.equal(queries.length, 2, 'the README and docs/metrics.md both give it')
  t.equal(new Set(queries).size, 1, 'the same query in both')
  // lt_1k: every first token within 0.5 s; ge_128k: half within 1 s, half in (1, 2.5].
  const series = [
    ttftBucket('lt_1k', '0.5', 100),
    ttftBucket('lt_1k', '1', 100),
    ttftBucket('lt_1k', '2.5', 100),
    ttftBucket('lt_1k', '+Inf', 100),
    ttftBucket('ge_128k', '0.5', 0),
    ttftBucket('ge_128k', '1', 50),
    ttftBucket('ge_128k', '2.5', 100),
    ttftBucket('ge_128k', '+Inf', 100),
  ]
  promtoolEvaluates(t, queries[0], series, [
    { labels: '{input_length_band="lt_1k"}', value: 0.495 },
    { labels: '{input_length_band="ge_128k"}', value: 2.47 },
  ])
})

t.test('"Failures per second by who is to blame" sums llm_requests_total by error_type, ok requests left out', async (t) => {
  const queries = [...queriesTitled('README.md', 'Failures per second by who is to blame'), ...queriesTitled('docs/metrics.md', 'Failures per second by who is to blame')]
  t.equal(queries.length, 2, 'the README and docs/metrics.md both give it')
  t.equal(new Set(queries).size, 1, 'the same query in both')
  const requests = (status: string, errorType: string, perMinute: number, route = '/openai') => ({
    series: `llm_requests_total{job="tokentap",instance="a",provider="openai",model="m",route="${route}",outcome="${errorType === 'none' ? 'ok' : 'error'}",status_code="${status}",error_type="${errorType}"}`,
    values: `0+${perMinute}x10`,
  })
  promtoolEvaluates(
    t,
    queries[0],
    [requests('200', 'none', 600), requests('429', 'upstream_rate_limited', 60), requests('429', 'upstream_rate_limited', 60, '/other'), requests('401', 'client_rejected', 30)],
    [
      { labels: '{error_type="upstream_rate_limited"}', value: 2 },
      { labels: '{error_type="client_rejected"}', value: 0.5 },
    ],
  )
})
