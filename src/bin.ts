#!/usr/bin/env node
// The package's `tokentap` bin (what `npx tokentap` runs): the process of src/server.ts. An
// entry of its own so that src/cli.ts (flags → config) stays a module that starts nothing.
import './server.ts'
