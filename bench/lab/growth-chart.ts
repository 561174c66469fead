import { esc, niceMax } from './chart.ts'

/**
 * A hand-written SVG of "how the cost grows" (bench/growth.ts and the scrape phase's scales):
 * small panels, each one measure against one axis of the work (open streams, series, stream
 * length) on a log scale, or a few named states (the long stream: before, open, after).
 */

export interface GrowthPanel {
  readonly title: string
  readonly yLabel: string
  /** The x values (log scale), or the names of the states (evenly spaced). */
  readonly x: readonly number[] | readonly string[]
  readonly series: readonly { readonly name: string; readonly values: readonly (number | null)[] }[]
}

const COLORS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed']
const W = 400
const H = 270
const M = { l: 56, r: 14, t: 30, b: 40 }
const COLUMNS = 3

const label = (v: number): string => (v >= 1000 ? `${+(v / 1000).toFixed(1)}k` : String(+v.toFixed(3)))

function panel(p: GrowthPanel, ox: number, oy: number): string {
  const pw = W - M.l - M.r
  const ph = H - M.t - M.b
  const named = typeof p.x[0] === 'string'
  const xs = p.x.map((v, i) => (named ? i : Math.log10(v as number)))
  const lo = Math.min(...xs)
  const hi = Math.max(...xs)
  const span = hi - lo || 1
  const pad = named ? 0.5 : 0.15 * span
  const x = (i: number): number => ox + M.l + ((xs[i] - lo + pad) / (span + 2 * pad)) * pw
  let top = 0
  for (const s of p.series) for (const v of s.values) if (v !== null && Number.isFinite(v)) top = Math.max(top, v)
  top = niceMax(top * 1.05)
  const y = (v: number): number => oy + M.t + ph - (Math.max(0, v) / top) * ph
  let out = `<g font-family="sans-serif" font-size="11">`
  out += `<text x="${ox + M.l + pw / 2}" y="${oy + 17}" text-anchor="middle" font-size="12" font-weight="bold">${esc(p.title)}</text>`
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4
    out += `<line x1="${ox + M.l}" x2="${ox + M.l + pw}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e7eb"/>`
    out += `<text x="${ox + M.l - 6}" y="${y(v) + 4}" text-anchor="end">${label(v)}</text>`
  }
  p.x.forEach((v, i) => {
    out += `<line x1="${x(i)}" x2="${x(i)}" y1="${oy + M.t}" y2="${oy + M.t + ph}" stroke="#e5e7eb"/>`
    out += `<text x="${x(i)}" y="${oy + M.t + ph + 15}" text-anchor="middle">${esc(typeof v === 'string' ? v : label(v))}</text>`
  })
  out += `<text transform="translate(${ox + 13},${oy + M.t + ph / 2}) rotate(-90)" text-anchor="middle">${esc(p.yLabel)}</text>`
  p.series.forEach((s, k) => {
    const color = COLORS[k % COLORS.length]
    const pts = s.values.flatMap((v, i) => (v === null || !Number.isFinite(v) ? [] : [`${x(i).toFixed(1)},${y(v).toFixed(1)}`]))
    if (pts.length > 1) out += `<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.join(' ')}"/>`
    for (const pt of pts) {
      const [cx, cy] = pt.split(',')
      out += `<circle cx="${cx}" cy="${cy}" r="3" fill="${color}"/>`
    }
    // The legend at the top right, where the lines (costs falling or flat with scale) rarely are.
    const ly = oy + M.t + 12 + k * 14
    const lx = ox + M.l + pw - 8
    out += `<line x1="${lx - 16}" x2="${lx}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color}" stroke-width="2"/>`
    out += `<text x="${lx - 20}" y="${ly}" text-anchor="end">${esc(s.name)}</text>`
  })
  return `${out}</g>`
}

export function growthChart(panels: readonly GrowthPanel[], caption: string): string {
  const rows = Math.ceil(panels.length / COLUMNS)
  const width = W * Math.min(COLUMNS, panels.length)
  const height = H * rows + 22
  let out = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`
  out += `<rect width="100%" height="100%" fill="#fff"/>`
  panels.forEach((p, i) => {
    out += panel(p, (i % COLUMNS) * W, Math.floor(i / COLUMNS) * H)
  })
  out += `<text x="${width / 2}" y="${height - 6}" text-anchor="middle" font-family="sans-serif" font-size="10" fill="#555">${esc(caption)}</text>`
  return `${out}</svg>\n`
}
