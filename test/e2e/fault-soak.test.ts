import t from 'tap'
import { EVERY_KIND, formatReport, runFaultSoak } from '../soak/fault-soak.ts'
import { distPath } from '../helpers/paths.ts'

// The built server (tap's `before` builds dist/): plain node starts in well under a second, where
// the test runner's TypeScript loader took many.
const SERVER = distPath('src/server.js')

t.test('a short fault soak exercises every fault and ends with every normal stream byte-identical, nothing in flight, no leaked socket and a clean SIGTERM', async (t) => {
  const report = await runFaultSoak({ seconds: 8, concurrency: 6, seed: 7, bombBytes: 8 * 1024 * 1024, server: [process.execPath, SERVER] })
  t.comment(formatReport(report))
  t.same(report.problems, [], 'no problem found')
  for (const kind of EVERY_KIND) t.ok(report.exercised[kind] >= 1, `${kind}: exercised (${report.exercised[kind]})`)
  t.ok(report.compared > 0, 'normal streams were compared')
  t.equal(report.mismatched, 0)
  t.equal(report.inFlightAtEnd, 0)
  t.equal(report.debugStreamsAtEnd, 0)
  t.ok(report.socketsAfter.client <= report.socketsBefore.client, 'no client-side socket left')
  t.ok(report.socketsAfter.upstream <= report.socketsBefore.upstream, 'no upstream-side socket left')
  t.equal(report.exitCode, 0)
})
