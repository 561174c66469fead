import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { Ajv } from 'ajv'
import type { ErrorObject } from 'ajv'
import { parse as parseYaml } from 'yaml'
import { TokentapError } from '../errors.ts'
import { checkBudgets } from '../cost/budgets.ts'
import { pricesOf } from '../cost/price-table.ts'
import { configSchema } from './schema.ts'
import type { Config } from './schema.ts'

/** The config a bare `npm start` uses: `config/default.yaml` of the package (run from src/ or dist/src/). */
export const DEFAULT_CONFIG_FILE =
  ['../../config/default.yaml', '../../../config/default.yaml']
    .map((p) => fileURLToPath(new URL(p, import.meta.url)))
    .find((p) => existsSync(p)) ?? 'config/default.yaml'

/** A route prefix as a path starts with it: no trailing slashes ('' for '/'; a loaded config keeps '/'), as the proxy matches and strips it. */
export const prefixBase = (prefix: string): string => prefix.replace(/\/+$/, '')

const ajv = new Ajv({
  allErrors: true,
  useDefaults: true,
  strict: true,
  allowUnionTypes: true,
  formats: { regex: isRegex },
})
const validate = ajv.compile(configSchema)

function isRegex(pattern: string): boolean {
  try {
    new RegExp(pattern)
    return true
  } catch {
    return false
  }
}

/** `routes[1].upstream`, from ajv's `/routes/1/upstream`. */
function keyOf(err: ErrorObject): string {
  let key = err.instancePath
    .split('/')
    .slice(1)
    .map((p) => (/^\d+$/.test(p) ? `[${p}]` : `.${p}`))
    .join('')
    .replace(/^\./, '')
  if (err.keyword === 'additionalProperties')
    key = key ? `${key}.${err.params.additionalProperty}` : String(err.params.additionalProperty)
  if (err.keyword === 'required')
    key = key ? `${key}.${err.params.missingProperty}` : String(err.params.missingProperty)
  return key || '(root)'
}

/** What a pattern of the schema asks for, in words (a pattern alone says only "the wrong form"). */
const PATTERN_WORDS: Record<string, string> = {
  '^https?://[^\\s/?#]+(/[^\\s?#]*)?$': 'must be a URL starting with http:// or https:// (e.g. http://127.0.0.1:18100)',
  '^https?://[^\\s/?#]+/?$':
    'must be a URL starting with http:// or https://, with no path (e.g. http://proxy.example:3128)',
  '^/[^?#\\s]*$': 'must start with / (e.g. /openai), with no ?, # or space',
  "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$": "must be a header name (letters, digits and !#$%&'*+.^_`|~-)",
}

function describe(err: ErrorObject): string {
  if (err.keyword === 'additionalProperties') return 'is not a known setting'
  if (err.keyword === 'required') return 'is required'
  if (err.keyword === 'enum') return `must be one of ${(err.params.allowedValues as unknown[]).join(', ')}`
  if (err.keyword === 'pattern') {
    const words = PATTERN_WORDS[String(err.params.pattern)]
    return words === undefined ? 'has the wrong form' : `has the wrong form: it ${words}`
  }
  return err.message ?? 'is invalid'
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const v of Object.values(value)) deepFreeze(v)
  }
  return value
}

/** Validates a parsed config: defaults, every key, then what the schema cannot say (unique prefixes, upstream xor simulator); frozen. */
export function validateConfig(raw: unknown): Config {
  const value = structuredClone(raw ?? {})
  if (!validate(value)) {
    const errors = validate.errors ?? []
    // Report each key once, with its most telling problem.
    const seen = new Set<string>()
    const lines: string[] = []
    for (const e of errors) {
      const k = keyOf(e)
      if (seen.has(k)) continue
      seen.add(k)
      lines.push(`'${k}' ${describe(e)}`)
    }
    throw new TokentapError('TOKENTAP_ERR_CONFIG_INVALID', lines.join('; '))
  }
  const config = value as unknown as Config
  const prefixes = new Set<string>()
  config.routes.forEach((route, i) => {
    const prefix = prefixBase(route.prefix) || '/'
    ;(route as { prefix: string }).prefix = prefix
    if (prefixes.has(prefix))
      throw new TokentapError('TOKENTAP_ERR_CONFIG_INVALID', `'routes[${i}].prefix' ${prefix} is used by another route`)
    prefixes.add(prefix)
    if ((route.upstream === undefined) === (route.simulator === undefined)) {
      throw new TokentapError(
        'TOKENTAP_ERR_CONFIG_INVALID',
        `'routes[${i}]' needs exactly one of 'upstream' or 'simulator'`,
      )
    }
  })
  const tenant = config.metrics.tenant
  if (tenant !== undefined) {
    if (tenant.from === 'api_key' && tenant.secret === undefined)
      throw new TokentapError('TOKENTAP_ERR_CONFIG_INVALID', `'metrics.tenant.secret' is needed with 'from: api_key'`)
    if (tenant.from !== 'api_key' && tenant.header === undefined)
      throw new TokentapError(
        'TOKENTAP_ERR_CONFIG_INVALID',
        `'metrics.tenant.header' is needed (or 'from: api_key' with a 'secret')`,
      )
  }
  checkBudgets(config)
  const frozen = deepFreeze(config)
  // Prices are data: a bad table or file stops start-up here, naming its key.
  if (frozen.pricing !== undefined) pricesOf(frozen.pricing)
  return frozen
}

const LOG_LEVELS: readonly string[] = configSchema.properties.log.properties.level.enum

const ENV_NUMBERS = {
  TOKENTAP_PORT: ['server', 'port'],
  TOKENTAP_ADMIN_PORT: ['admin', 'port'],
} as const

const ENV_HOSTS = {
  TOKENTAP_HOST: 'server',
  TOKENTAP_ADMIN_HOST: 'admin',
} as const

/** Applies the container overrides (TOKENTAP_HOST, TOKENTAP_ADMIN_HOST, TOKENTAP_PORT, TOKENTAP_ADMIN_PORT, TOKENTAP_LOG_LEVEL). */
export function applyEnv(raw: Record<string, unknown>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const out: Record<string, unknown> = { ...raw }
  for (const [name, [section, key]] of Object.entries(ENV_NUMBERS)) {
    const v = env[name]
    if (v === undefined || v === '') continue
    if (!/^\d+$/.test(v) || Number(v) > 65535)
      throw new TokentapError('TOKENTAP_ERR_ENV_INVALID', name, v, 'a port number from 0 to 65535 is needed')
    out[section] = { ...(out[section] as object), [key]: Number(v) }
  }
  for (const [name, section] of Object.entries(ENV_HOSTS)) {
    const v = env[name]
    if (v === undefined || v === '') continue
    if (/\s/.test(v)) throw new TokentapError('TOKENTAP_ERR_ENV_INVALID', name, v, 'a host name or address is needed')
    out[section] = { ...(out[section] as object), host: v }
  }
  const level = env.TOKENTAP_LOG_LEVEL
  if (level !== undefined && level !== '') {
    // Checked here so the message names the variable, not the file key it overrides.
    if (!LOG_LEVELS.includes(level))
      throw new TokentapError(
        'TOKENTAP_ERR_ENV_INVALID',
        'TOKENTAP_LOG_LEVEL',
        level,
        `must be one of ${LOG_LEVELS.join(', ')}`,
      )
    out.log = { ...(out.log as object), level }
  }
  return out
}

/** Reads, parses, applies env overrides, validates and freezes. Throws TokentapError naming the key. */
export function loadConfig(file: string = DEFAULT_CONFIG_FILE, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    throw new TokentapError('TOKENTAP_ERR_CONFIG_READ', file, (err as Error).message)
  }
  let raw: unknown
  try {
    raw = parseYaml(text)
  } catch (err) {
    throw new TokentapError('TOKENTAP_ERR_CONFIG_YAML', file, (err as Error).message)
  }
  if (raw !== null && raw !== undefined && (typeof raw !== 'object' || Array.isArray(raw))) {
    throw new TokentapError('TOKENTAP_ERR_CONFIG_INVALID', `'(root)' must be a mapping of settings`)
  }
  return validateConfig(applyEnv((raw ?? {}) as Record<string, unknown>, env))
}
