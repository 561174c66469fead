import { runGroup } from './run-group.ts'

await runGroup('cluster')
