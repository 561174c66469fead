/** The names a model may be priced under, most specific first, since providers name one model many ways; pure. */

/** Bedrock cross-region inference profiles: `us.anthropic.claude-…` (https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-support.html). */
const BEDROCK_REGION = /^(?:us|eu|apac|ap|jp|au|ca|global|us-gov)\./
/** Bedrock model ids: `<vendor>.<model>-v<n>[:<n>]`. */
const BEDROCK_VENDOR =
  /^(?:anthropic|amazon|meta|mistral|cohere|ai21|deepseek|openai|qwen|writer|google|moonshotai|minimax)\./
const BEDROCK_VERSION = /-v\d+(?::\d+)?$/
/** A dated snapshot or alias suffix: `-2024-08-06`, `-20250514`, `-0613`, `-2411`, `-latest`. */
const SNAPSHOT = /-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|latest)$/

/** One step from a name to a more general one, or undefined. */
const STEPS: readonly ((name: string) => string | undefined)[] = [
  // ARNs and paths (`arn:aws:bedrock:…:inference-profile/us.anthropic…`, `models/gemini-2.5-pro`, `publishers/google/models/…`).
  (n) => (n.includes('/') ? n.slice(n.lastIndexOf('/') + 1) : undefined),
  // Vertex's `claude-sonnet-4@20250514`: the same snapshot as Anthropic's `claude-sonnet-4-20250514`.
  (n) => (n.includes('@') ? n.replace('@', '-') : undefined),
  (n) => (n.includes('@') ? n.slice(0, n.indexOf('@')) : undefined),
  (n) => (BEDROCK_REGION.test(n) ? n.replace(BEDROCK_REGION, '') : undefined),
  (n) => (BEDROCK_VENDOR.test(n) ? n.replace(BEDROCK_VENDOR, '').replace(BEDROCK_VERSION, '') : undefined),
  // Fine-tunes (`ft:gpt-4o-mini-2024-07-18:org::id`) and tagged names (`gpt-3.5-turbo-instruct:20230824-v2`).
  (n) => (n.startsWith('ft:') ? n.split(':').slice(0, 2).join(':') : undefined),
  (n) => (n.startsWith('ft:') ? n.split(':')[1] : undefined),
  (n) => (n.includes(':') && !n.startsWith('ft:') ? n.slice(0, n.indexOf(':')) : undefined),
  (n) => (SNAPSHOT.test(n) ? n.replace(SNAPSHOT, '') : undefined),
]

/** At most this many candidates per name: every step applies a few times at most. */
const MAX_CANDIDATES = 32

/** The name (lower-cased) and its generalisations, breadth first: `gpt-4o-2024-08-06` → [`gpt-4o-2024-08-06`, `gpt-4o`]. */
export function nameCandidates(model: string): string[] {
  const first = model.trim().toLowerCase()
  const out = [first]
  for (let i = 0; i < out.length && out.length < MAX_CANDIDATES; i++) {
    for (const step of STEPS) {
      const next = step(out[i])
      if (next !== undefined && next !== '' && !out.includes(next)) out.push(next)
    }
  }
  return out.slice(0, MAX_CANDIDATES)
}
