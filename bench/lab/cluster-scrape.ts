import { clusterScrape, describeClusterScrape } from '../cluster-phase.ts'

/**
 * The cluster primary's /metrics against one process's at the same label sets, alone
 * (`npm run bench:lab -- cluster-scrape [--sets 100,1000,4000] [--json]`): bench/cluster-phase.ts,
 * the phase `npm run bench` runs with its verdict.
 */

const i = process.argv.indexOf('--sets')
const sets = (i < 0 ? '100,1000,4000' : process.argv[i + 1]).split(',').map(Number)
const out = []
for (const n of sets) {
  out.push(await clusterScrape(n))
  if (!process.argv.includes('--json')) process.stdout.write(`${describeClusterScrape(out[out.length - 1])}\n`)
}
if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(out)}\n`)
