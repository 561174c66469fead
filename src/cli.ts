import { parseArgs } from 'node:util'
import { applyEnv, DEFAULT_CONFIG_FILE, loadConfig, validateConfig } from './config/load-config.ts'
import { budgetRules } from './cost/budgets.ts'
import { PROVIDERS } from './config/schema.ts'
import type { Config } from './config/schema.ts'
import { TokentapError } from './errors.ts'

/** The `tokentap` command line: flags → config, and the usage text; pure (src/server.ts runs the result). */

export const USAGE = `Usage: tokentap [options]
       tokentap budgets [--config FILE]   print the Prometheus rules and alerts of the config's budgets

A transparent proxy for LLM APIs that measures TTFT, ITL, TPOT and TPS as Prometheus metrics.

  -c, --config FILE     YAML config file (default: $TOKENTAP_CONFIG, else config/default.yaml)
      --upstream URL    one-route proxy to URL, no config file
      --provider P      with --upstream: ${PROVIDERS.join(' | ')} (default: auto)
      --prefix /x       with --upstream: the path prefix clients use, stripped before forwarding
                        (default: /, so clients use the proxy's address as the upstream's:
                        tokentap --upstream https://api.openai.com → OPENAI_BASE_URL=http://localhost:8080/v1)
      --port N          proxy port (default: 8080, or $TOKENTAP_PORT)
      --admin-port N    admin port: /metrics, /healthz, /readyz (default: 9464, or $TOKENTAP_ADMIN_PORT)
  -h, --help            print this help and exit

Environment: TOKENTAP_CONFIG, TOKENTAP_PORT, TOKENTAP_ADMIN_PORT, TOKENTAP_LOG_LEVEL.
Flags override the environment, which overrides the file.
`

/** What the command line asks for. */
export type CliCommand =
  | { readonly kind: 'help' }
  /** A subcommand's output (`budgets`): the text for stdout; exit code 0. */
  | { readonly kind: 'print'; readonly text: string }
  | { readonly kind: 'run'; readonly config: Config }
  /** A usage mistake: one line for stderr, then the usage; exit code 2. */
  | { readonly kind: 'usage-error'; readonly message: string }
  /** A config that does not load or validate: its message; exit code 1. */
  | { readonly kind: 'config-error'; readonly message: string }

const OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  config: { type: 'string', short: 'c' },
  upstream: { type: 'string' },
  provider: { type: 'string' },
  prefix: { type: 'string' },
  port: { type: 'string' },
  'admin-port': { type: 'string' },
} as const

/** Parses `argv` (without node and the script) against `env`; never throws, never exits. */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): CliCommand {
  if (argv[0] === 'budgets') return parseBudgets(argv.slice(1), env)
  let values: { [K in keyof typeof OPTIONS]?: (typeof OPTIONS)[K]['type'] extends 'boolean' ? boolean : string }
  try {
    values = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: false, strict: true }).values
  } catch (err) {
    // node:util's messages are long and name its own API; the first sentence says it.
    return { kind: 'usage-error', message: (err as Error).message.split('. ')[0].replace(/\.$/, '') }
  }
  if (values.help === true) return { kind: 'help' }
  const ports: [string, string | undefined][] = [
    ['--port', values.port],
    ['--admin-port', values['admin-port']],
  ]
  for (const [flag, v] of ports) {
    if (v !== undefined && (!/^\d+$/.test(v) || Number(v) > 65535))
      return { kind: 'usage-error', message: `${flag} '${v}' is not a port number from 0 to 65535` }
  }
  if (values.upstream === undefined) {
    for (const flag of ['provider', 'prefix'] as const)
      if (values[flag] !== undefined) return { kind: 'usage-error', message: `--${flag} needs --upstream` }
  } else if (values.config !== undefined)
    return { kind: 'usage-error', message: '--upstream and --config cannot be used together' }
  // Flags reach the config the way the environment does: the last override before validation.
  const withFlags: NodeJS.ProcessEnv = { ...env }
  if (values.port !== undefined) withFlags.TOKENTAP_PORT = values.port
  if (values['admin-port'] !== undefined) withFlags.TOKENTAP_ADMIN_PORT = values['admin-port']
  try {
    if (values.upstream !== undefined)
      return { kind: 'run', config: oneRoute(values.upstream, values.provider, values.prefix, withFlags) }
    return { kind: 'run', config: loadConfig(values.config ?? (env.TOKENTAP_CONFIG || undefined), withFlags) }
  } catch (err) {
    if (err instanceof TokentapError) return { kind: 'config-error', message: err.message }
    throw err
  }
}

/** `tokentap budgets [--config FILE]`: the rules file of the config's budgets (src/cost/budgets.ts). */
function parseBudgets(argv: readonly string[], env: NodeJS.ProcessEnv): CliCommand {
  let file: string | undefined
  try {
    const { values } = parseArgs({
      args: [...argv],
      options: { config: OPTIONS.config, help: OPTIONS.help },
      allowPositionals: false,
      strict: true,
    })
    if (values.help === true) return { kind: 'help' }
    file = values.config ?? (env.TOKENTAP_CONFIG || undefined)
  } catch (err) {
    return { kind: 'usage-error', message: `budgets: ${(err as Error).message.split('. ')[0].replace(/\.$/, '')}` }
  }
  try {
    const config = loadConfig(file, env)
    if (config.budgets.length === 0)
      return {
        kind: 'config-error',
        message: `'budgets' is empty in ${file ?? DEFAULT_CONFIG_FILE}: no rules to write`,
      }
    return { kind: 'print', text: budgetRules(config, file ?? DEFAULT_CONFIG_FILE) }
  } catch (err) {
    if (err instanceof TokentapError) return { kind: 'config-error', message: err.message }
    throw err
  }
}

/** `--upstream URL [--provider P] [--prefix /x]`: a proxy with one route and every other setting at its default. */
function oneRoute(
  upstream: string,
  provider: string | undefined,
  prefix: string | undefined,
  env: NodeJS.ProcessEnv,
): Config {
  const route = { prefix: prefix ?? '/', upstream, provider: provider ?? 'auto' }
  try {
    return validateConfig(applyEnv({ routes: [route] }, env))
  } catch (err) {
    // The schema names `routes[0].upstream`; the user typed `--upstream`.
    if (err instanceof TokentapError && err.code === 'TOKENTAP_ERR_CONFIG_INVALID')
      throw new TokentapError(
        'TOKENTAP_ERR_CONFIG_INVALID',
        err.message
          .replace(/^invalid configuration: /, '')
          .replace(/'routes\[0\]\.(upstream|provider|prefix)'/g, '--$1'),
      )
    throw err
  }
}

/** What a command line that does not run the proxy ends in: the text, its stream and the exit code. */
export function outcomeOf(cmd: Exclude<CliCommand, { kind: 'run' }>): {
  readonly stream: 'stdout' | 'stderr'
  readonly text: string
  readonly code: number
} {
  if (cmd.kind === 'help') return { stream: 'stdout', text: USAGE, code: 0 }
  if (cmd.kind === 'print') return { stream: 'stdout', text: cmd.text, code: 0 }
  if (cmd.kind === 'usage-error') return { stream: 'stderr', text: `tokentap: ${cmd.message}\n\n${USAGE}`, code: 2 }
  return { stream: 'stderr', text: `tokentap: ${cmd.message}\n`, code: 1 }
}
