/** Prometheus text exposition helpers (https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format). */

/** Escapes a label value: backslash, double quote and line feed. */
export function escapeLabelValue(value: string): string {
  if (!/["\\\n]/.test(value)) return value
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')
}

/** Escapes HELP text; OpenMetrics also escapes `"` (https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md#abnf). */
function escapeHelp(text: string, openMetrics = false): string {
  const out = text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')
  return openMetrics ? out.replace(/"/g, '\\"') : out
}

/** `name="value",…` for the given names and values, without braces. */
export function renderLabels(names: readonly string[], values: readonly string[]): string {
  let out = ''
  for (let i = 0; i < names.length; i++) {
    if (i > 0) out += ','
    out += `${names[i]}="${escapeLabelValue(values[i])}"`
  }
  return out
}

export function formatValue(value: number): string {
  if (Number.isNaN(value)) return 'NaN'
  if (value === Infinity) return '+Inf'
  if (value === -Infinity) return '-Inf'
  return String(value)
}

export function header(name: string, help: string, type: string, openMetrics = false): string {
  return `# HELP ${name} ${escapeHelp(help, openMetrics)}\n# TYPE ${name} ${type}\n`
}
