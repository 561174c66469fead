import { pct } from '../stats.ts'

/**
 * A hand-written SVG of gap-distortion distributions: one panel per load level, one line per
 * path, x = percentile on a "nines" scale (50, 90, 99, 99.9, 99.99), y = distortion in ms.
 */

export interface Panel {
  readonly title: string
  readonly series: readonly { readonly name: string; readonly values: Float64Array }[]
}

const COLORS: Record<string, string> = {
  direct: '#6b7280',
  'tcp-relay': '#a855f7',
  'node-relay': '#d97706',
  'fastify-relay': '#0891b2',
  nginx: '#059669',
  tokentap: '#2563eb',
  portkey: '#dc2626',
  'portkey@50': '#f472b6',
}
const W = 460
const H = 300
const M = { l: 52, r: 14, t: 30, b: 44 }
const MAX_NINES = 4

export const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;')

export function niceMax(v: number): number {
  if (!(v > 0)) return 1
  const p = 10 ** Math.floor(Math.log10(v))
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p
  return 10 * p
}

function panel(p: Panel, ox: number): string {
  const pw = W - M.l - M.r
  const ph = H - M.t - M.b
  // The y scale covers every path's 99.99th percentile (the max of a few outliers would flatten the rest).
  let top = 0
  for (const s of p.series) top = Math.max(top, pct(s.values, 99.99))
  top = niceMax(top)
  const x = (nines: number): number => ox + M.l + (Math.min(nines, MAX_NINES) / MAX_NINES) * pw
  const y = (v: number): number => M.t + ph - (Math.min(v, top) / top) * ph
  let out = `<g font-family="sans-serif" font-size="11">`
  out += `<text x="${ox + M.l + pw / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">${esc(p.title)}</text>`
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4
    out += `<line x1="${x(0)}" x2="${x(MAX_NINES)}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e7eb"/>`
    out += `<text x="${x(0) - 6}" y="${y(v) + 4}" text-anchor="end">${+v.toFixed(3)}</text>`
  }
  const labels = ['0', '90', '99', '99.9', '99.99']
  for (let n = 0; n <= MAX_NINES; n++) {
    out += `<line x1="${x(n)}" x2="${x(n)}" y1="${M.t}" y2="${M.t + ph}" stroke="#e5e7eb"/>`
    out += `<text x="${x(n)}" y="${M.t + ph + 15}" text-anchor="middle">${labels[n]}</text>`
  }
  out += `<text x="${x(MAX_NINES / 2)}" y="${H - 8}" text-anchor="middle">percentile</text>`
  out += `<text transform="translate(${ox + 13},${M.t + ph / 2}) rotate(-90)" text-anchor="middle">gap distortion (ms)</text>`
  for (const s of p.series) {
    if (s.values.length === 0) continue
    const pts: string[] = []
    for (let i = 0; i <= 200; i++) {
      const nines = (i / 200) * MAX_NINES
      const q = 100 * (1 - 10 ** -nines)
      pts.push(`${x(nines).toFixed(1)},${y(pct(s.values, q)).toFixed(1)}`)
    }
    out += `<polyline fill="none" stroke="${COLORS[s.name] ?? '#000'}" stroke-width="2" points="${pts.join(' ')}"/>`
  }
  p.series.forEach((s, i) => {
    const ly = M.t + 12 + i * 15
    out += `<line x1="${x(0) + 8}" x2="${x(0) + 26}" y1="${ly - 4}" y2="${ly - 4}" stroke="${COLORS[s.name] ?? '#000'}" stroke-width="2"/>`
    out += `<text x="${x(0) + 30}" y="${ly}">${esc(s.name)}</text>`
  })
  return `${out}</g>`
}

export function gapChart(panels: readonly Panel[], caption: string): string {
  const width = W * panels.length
  const height = H + 22
  let out = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`
  out += `<rect width="100%" height="100%" fill="#fff"/>`
  for (let i = 0; i < panels.length; i++) out += panel(panels[i], i * W)
  out += `<text x="${width / 2}" y="${height - 6}" text-anchor="middle" font-family="sans-serif" font-size="10" fill="#555">${esc(caption)}</text>`
  return `${out}</svg>\n`
}
