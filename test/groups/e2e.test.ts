import { runGroup } from './run-group.ts'

await runGroup('e2e')
