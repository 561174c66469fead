import type UPlot from 'uplot'
import type { LiveMessage, RealtimeMessage, SeriesView, SpendView } from '../live-message-types.ts'

/**
 * The live page's script (`/live/app.js`), built by scripts/build-client.mjs and loaded as a
 * classic script after uPlot's, so it imports types only.
 */

declare global {
  interface Window {
    /** uPlot's IIFE build, loaded by the page before this script; absent if it failed to load. */
    uPlot?: typeof UPlot
  }
}

/** A stream's row in the strip, kept across messages (a message carries only the new ticks). */
interface Row {
  readonly label: string
  readonly t0: number
  readonly ticks: number[]
  /** Tokens per tick. */
  readonly k: number[]
  stalls: number
  /** The marker of a stall in progress. */
  live: HTMLElement | null
  /** performance.now() when it ended; 0 while in flight. */
  ended: number
  gap: number
}

/** A route's card, and a route × model block in it with its chart. */
interface Card {
  readonly models: HTMLElement
  readonly bands: HTMLElement
}
interface ModelBlock {
  readonly el: HTMLElement
  plot: UPlot | null
  p99: number | null
}

const STRIP_MS = 30000
const FADE_MS = 10000
const ROW = 20
const LABEL = 250
/** The window buttons' choice: 0, 1, 2 for 1, 5, 15 minutes. */
let win = 0
let last: LiveMessage | null = null
/** The server's monotonic clock minus the browser's (ms). */
let offset = 0
let stallMs = 1000
const rows = new Map<string, Row>()
const cards = new Map<string, Card>()
const models = new Map<string, ModelBlock>()
const markers: HTMLElement[] = []
const $ = <E extends Element = HTMLElement>(sel: string): E => document.querySelector(sel) as E
const esc = (s: unknown): string => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
const fmt = (v: number | null | undefined, unit: string): string => {
  if (v === null || v === undefined) return '<td class="none">–</td>'
  const s = v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)
  return `<td>${s}${unit ? ` ${unit}` : ''}</td>`
}
const num = (v: number): string => (v >= 1000 ? `${(v / 1000).toFixed(1)}k` : String(Math.round(v * 10) / 10))
const serverNow = (): number => performance.now() + offset
const key = (route: string, model: string): string => `${route}\u0000${model}`

for (const b of document.querySelectorAll<HTMLElement>('.windows button')) {
  b.addEventListener('click', () => {
    win = Number(b.dataset.w)
    for (const o of document.querySelectorAll('.windows button')) o.classList.toggle('on', o === b)
    if (last) render(last)
  })
}

function addMarker(id: string, text: string): HTMLElement {
  const el = document.createElement('div')
  el.className = 'stall-marker'
  el.dataset.id = id
  el.textContent = text
  $('#stalls').prepend(el)
  markers.push(el)
  if (markers.length > 12) markers.shift()?.remove()
  return el
}

/** Ends a stall in progress: its marker reads as a past stall. */
function settle(r: Row): void {
  if (r.live === null) return
  r.live.textContent = (r.live.textContent ?? '').replace('stalling', 'stall')
  r.live = null
}

// The strip: one row per stream, oldest first; ticks are content chunks, red spans are stalls.
function updateStreams(msg: LiveMessage): void {
  const seen = new Set<string>()
  for (const s of msg.streams) {
    seen.add(s.id)
    let r = rows.get(s.id)
    if (!r) {
      r = {
        label: `${s.route} · ${s.model || '?'}`,
        t0: s.t0,
        ticks: [],
        k: [],
        stalls: 0,
        live: null,
        ended: 0,
        gap: 0,
      }
      rows.set(s.id, r)
    }
    for (let i = 0; i < s.ticks.length; i++) {
      r.ticks.push(s.ticks[i])
      r.k.push(s.k ? s.k[i] : 1)
    }
    if (r.ticks.length > 6000) {
      r.ticks.splice(0, r.ticks.length - 6000)
      r.k.splice(0, r.k.length - 6000)
    }
    r.gap = s.gap
    r.ended = s.ended ? r.ended || performance.now() : 0
    if (s.gap > stallMs) {
      const text = `⚠ stalling ${(s.gap / 1000).toFixed(2)} s · ${r.label} · ${s.id}`
      if (!r.live) r.live = addMarker(s.id, text)
      else r.live.textContent = text
    }
    if (s.stalls > r.stalls) {
      if (r.live) {
        r.live.remove()
        r.live = null
      }
      addMarker(s.id, `⚠ stall ${(s.maxGap / 1000).toFixed(2)} s · ${r.label} · ${s.id}`)
      r.stalls = s.stalls
    } else if (r.live && s.gap <= stallMs) {
      settle(r)
    }
  }
  const now = performance.now()
  for (const [id, r] of rows) {
    if (seen.has(id) || r.ended) continue
    r.ended = now
    settle(r)
  }
  $('#strip-cap').textContent = msg.omittedStreams > 0 ? `(oldest ${msg.streams.length} of ${msg.system.inFlight})` : ''
}

function drawStrip(): void {
  const canvas = $<HTMLCanvasElement>('#strip')
  const now = performance.now()
  const sNow = serverNow()
  for (const [id, r] of rows) if (r.ended && now - r.ended > FADE_MS) rows.delete(id)
  const width = canvas.clientWidth
  const n = Math.max(rows.size, 1)
  const height = n * ROW + 22
  const dpr = window.devicePixelRatio || 1
  if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
    canvas.width = Math.round(width * dpr)
    canvas.height = Math.round(height * dpr)
    canvas.style.height = `${height}px`
  }
  const ctx = canvas.getContext('2d') as CanvasRenderingContext2D
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0)
  ctx.clearRect(0, 0, width, height)
  const plotW = width - LABEL - 8
  const x = (t: number): number => LABEL + plotW - ((sNow - t) / STRIP_MS) * plotW
  ctx.font = '11px system-ui, sans-serif'
  ctx.fillStyle = '#8a96a3'
  ctx.strokeStyle = '#2a333d'
  for (let s = 0; s <= 30; s += 5) {
    const gx = LABEL + plotW - (s / 30) * plotW
    ctx.beginPath()
    ctx.moveTo(gx, 0)
    ctx.lineTo(gx, height - 18)
    ctx.stroke()
    ctx.fillText(s === 0 ? 'now' : `−${s} s`, gx - (s === 0 ? 22 : 12), height - 5)
  }
  if (rows.size === 0) {
    ctx.fillText('no streams in flight', 8, 14)
    return
  }
  let i = 0
  for (const [id, r] of rows) {
    const y = i * ROW + 2
    const mid = y + ROW / 2
    ctx.globalAlpha = r.ended ? Math.max(0.08, 1 - (now - r.ended) / FADE_MS) : 1
    ctx.fillStyle = '#d8dee6'
    ctx.fillText(`${r.label} · ${id}`.slice(0, 42), 6, mid + 4)
    let prev: number | null = null
    for (let j = 0; j < r.ticks.length; j++) {
      const t = r.t0 + r.ticks[j]
      if (prev !== null && t - prev > stallMs) {
        ctx.fillStyle = 'rgba(255,92,92,.35)'
        ctx.fillRect(Math.max(LABEL, x(prev)), y + 3, x(t) - Math.max(LABEL, x(prev)), ROW - 6)
      }
      prev = t
      const px = x(t)
      if (px < LABEL) continue
      const h = Math.min(ROW - 4, 8 + 3 * Math.log2(r.k[j] || 1))
      ctx.fillStyle = r.k[j] > 1 ? '#b38cff' : '#6cb6ff'
      ctx.fillRect(px, mid - h / 2, 1.5, h)
    }
    // A stall in progress as the server knew it: the browser's clock runs on between messages.
    const lastT = prev === null ? r.t0 : prev
    if (!r.ended && r.gap > stallMs) {
      ctx.fillStyle = 'rgba(255,92,92,.5)'
      ctx.fillRect(Math.max(LABEL, x(lastT)), y + 3, x(sNow) - Math.max(LABEL, x(lastT)), ROW - 6)
    }
    i++
  }
  ctx.globalAlpha = 1
}
setInterval(drawStrip, 100)

function qRow(name: string, q: (number | null)[], unit: string): string {
  const o = win * 4
  return `<tr><td>${name}</td>${fmt(q[o], unit)}${fmt(q[o + 1], unit)}${fmt(q[o + 2], unit)}<td>${num(q[o + 3] as number)}</td></tr>`
}

type Band = { band: string; itl: (number | null)[]; tpot: (number | null)[] }

function bandTable(title: string, bands: Band[]): string {
  let h = `<table><tr><th>${title}</th><th>ITL p50</th><th>ITL p99</th><th>tokens</th><th>TPOT p50</th><th>TPOT p99</th><th>requests</th></tr>`
  for (const b of bands) {
    h += `<tr><td>${esc(b.band)}</td>${fmt(b.itl[0], 'ms')}${fmt(b.itl[1], 'ms')}<td>${num(b.itl[2] as number)}</td>${fmt(b.tpot[0], 'ms')}${fmt(b.tpot[1], 'ms')}<td>${num(b.tpot[2] as number)}</td></tr>`
  }
  return `${h}</table>`
}

function ttftTable(bands: { band: string; ttft: (number | null)[] }[]): string {
  let h = '<table><tr><th>prompt</th><th>TTFT p50</th><th>TTFT p99</th><th>requests</th></tr>'
  for (const b of bands) {
    const n = b.ttft[2] as number
    if (n > 0)
      h += `<tr data-input-band="${esc(b.band)}"><td>${esc(b.band)}</td>${fmt(b.ttft[0], 'ms')}${fmt(b.ttft[1], 'ms')}<td>${num(n)}</td></tr>`
  }
  return `${h}</table>`
}

function card(route: string): Card {
  let c = cards.get(route)
  if (c) return c
  const el = document.createElement('article')
  el.className = 'card'
  el.dataset.route = route
  el.innerHTML = `<h3>${esc(route)}<small>route</small></h3><div class="models"></div><div class="bands"></div>`
  $('#routes').appendChild(el)
  c = { models: el.querySelector('.models') as HTMLElement, bands: el.querySelector('.bands') as HTMLElement }
  cards.set(route, c)
  return c
}

// 1, 2, 5 × 10^p inside the range: a readable log axis.
function logSplits(_u: UPlot, _i: number, min: number, max: number): number[] {
  const out: number[] = []
  for (let p = Math.floor(Math.log10(min)); p <= Math.ceil(Math.log10(max)); p++) {
    for (const f of [1, 2, 5]) {
      const v = f * 10 ** p
      if (v >= min && v <= max) out.push(Number(v.toPrecision(3)))
    }
  }
  return out.length >= 2 ? out : [min, max]
}
function msLabel(v: number | null | undefined): string {
  if (v === null || v === undefined) return ''
  return v >= 1000 ? `${Number((v / 1000).toPrecision(3))} s` : `${Number(v.toPrecision(3))} ms`
}

function chart(m: ModelBlock, s: SeriesView): void {
  const p99 = s.q.itl[6]
  m.p99 = p99
  const uPlot = window.uPlot
  if (!s.dist || !uPlot) return
  ;(m.el.querySelector('.zero') as HTMLElement).textContent =
    s.dist.zero > 0
      ? `; ${Math.round(s.dist.zero * 100)} % of tokens came 0 ms after the previous chunk (same read)`
      : ''
  if (s.dist.x.length === 0) return
  // Stepped paths hold a value until the next point, so a bar before a gap is closed with a 0 at its right edge.
  const xs: number[] = []
  const ys: number[] = []
  const W = 1.1735
  for (let i = 0; i < s.dist.x.length; i++) {
    xs.push(s.dist.x[i])
    ys.push(s.dist.y[i])
    if (i === s.dist.x.length - 1 || s.dist.x[i + 1] > s.dist.x[i] * W * 1.01) {
      xs.push(s.dist.x[i] * W)
      ys.push(0)
    }
  }
  const data: UPlot.AlignedData = [xs, ys]
  if (m.plot) {
    m.plot.setData(data)
    return
  }
  m.plot = new uPlot(
    {
      width: Math.max(300, m.el.clientWidth - 24),
      height: 130,
      scales: { x: { time: false, distr: 3, log: 10 }, y: { range: [0, null] } },
      axes: [
        { stroke: '#8a96a3', grid: { stroke: '#2a333d' }, splits: logSplits, values: (_u, v) => v.map(msLabel) },
        {
          stroke: '#8a96a3',
          grid: { stroke: '#2a333d' },
          size: 44,
          values: (_u, v) => v.map((x) => `${Math.round(x * 100)}%`),
        },
      ],
      series: [
        {},
        {
          label: 'share of tokens',
          stroke: '#6cb6ff',
          fill: 'rgba(108,182,255,.25)',
          paths: uPlot.paths.stepped?.({ align: 1 }),
          points: { show: false },
        },
      ],
      cursor: { show: false },
      legend: { show: false },
      hooks: {
        draw: [
          (u) => {
            if (m.p99 === null || m.p99 === undefined) return
            const cx = u.ctx
            const px = u.valToPos(m.p99, 'x', true)
            cx.save()
            cx.strokeStyle = '#ff5c5c'
            cx.lineWidth = 2 * devicePixelRatio
            cx.setLineDash([6, 4])
            cx.beginPath()
            cx.moveTo(px, u.bbox.top)
            cx.lineTo(px, u.bbox.top + u.bbox.height)
            cx.stroke()
            cx.fillStyle = '#ff5c5c'
            cx.font = `${11 * devicePixelRatio}px system-ui`
            cx.fillText(`p99 ${msLabel(m.p99)}`, px + 4 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio)
            cx.restore()
          },
        ],
      },
    },
    data,
    m.el.querySelector('.dist-plot') as HTMLElement,
  )
}

function render(msg: LiveMessage): void {
  const sys = msg.system
  $('#inflight').textContent = String(sys.inFlight)
  $('#sys-tps').textContent = num(sys.tokensPerSecond[win])
  for (const o of ['ok', 'error', 'cancelled'] as const) $(`[data-count="${o}"]`).textContent = num(sys[o][win])
  renderHealth(msg)
  if (msg.series.length > 0) $('#routes .empty')?.remove()
  for (const s of msg.series) {
    const c = card(s.route)
    const k = key(s.route, s.model)
    let m = models.get(k)
    if (!m) {
      const el = document.createElement('div')
      el.className = 'model'
      el.dataset.model = s.model
      el.innerHTML =
        '<h4></h4><div class="counts"></div><table class="q"></table><div class="dist"><div class="cap">ITL distribution, last 5 min, token-weighted; dashed: p99<span class="zero"></span></div><div class="dist-plot"></div></div>'
      c.models.appendChild(el)
      m = { el, plot: null, p99: null }
      models.set(k, m)
    }
    ;(m.el.querySelector('h4') as HTMLElement).innerHTML = `${esc(s.model)} <small>${esc(s.provider)}</small>`
    ;(m.el.querySelector('.counts') as HTMLElement).innerHTML =
      `<span class="ok" data-series-count="ok">ok <b>${num(s.ok[win])}</b></span>` +
      `<span class="error" data-series-count="error">error <b>${num(s.error[win])}</b></span>` +
      `<span class="cancelled" data-series-count="cancelled">cancelled <b>${num(s.cancelled[win])}</b></span>` +
      `<span class="stalls" data-series-count="stalls">stalls <b>${num(s.stalls[win])}</b></span>` +
      `<span>tokens/s <b>${num(s.tokensPerSecond[win])}</b></span>`
    ;(m.el.querySelector('table.q') as HTMLElement).innerHTML =
      '<tr><th></th><th>p50</th><th>p95</th><th>p99</th><th>n</th></tr>' +
      qRow('response headers', s.q.headers, 'ms') +
      qRow('TTFT', s.q.ttft, 'ms') +
      qRow('ITL', s.q.itl, 'ms') +
      qRow('TPOT', s.q.tpot, 'ms') +
      qRow('E2E', s.q.e2e, 'ms') +
      qRow('tokens/s per user', s.q.tps, '')
    chart(m, s)
  }
  renderRealtime(msg.realtime)
  for (const b of msg.routes) {
    const streamed = b.clients.streamed[win]
    const slow = b.clients.slow[win]
    card(b.route).bands.innerHTML =
      `<div><h2>By output length, last 5 min</h2>${bandTable('length', b.length)}</div>` +
      `<div><h2>By concurrency at start, last 5 min</h2>${bandTable('in flight', b.concurrency)}</div>` +
      `<div><h2>TTFT by prompt length (input tokens), last 5 min</h2>${ttftTable(b.input)}</div>` +
      `<div data-slow-clients="${slow}/${streamed}">Slow clients (bytes waited &gt; 100 ms for the client socket): <b>` +
      `${streamed > 0 ? `${Math.round((100 * slow) / streamed)} %` : '–'}</b> of ${num(streamed)} streamed requests</div>`
  }
}

const pct = (part: number, all: number): string => (all > 0 ? `${Math.round((1000 * part) / all) / 10} %` : '–')
const ago = (ms: number): string =>
  ms >= 60000 ? `${Math.round(ms / 60000)} min ago` : `${Math.round(ms / 1000)} s ago`
const mb = (bytes: number): string => `${(bytes / 1048576).toFixed(0)} MB`
const STATUS_NOTE: Record<number, string> = {
  0: 'other codes',
  200: 'error inside the stream',
  499: 'client closed',
  502: 'upstream unreachable or bad answer',
  504: 'upstream timed out',
}

// The service's health, for the right-hand column.
function renderHealth(msg: LiveMessage): void {
  const sys = msg.system
  const all = sys.ok[win] + sys.error[win] + sys.cancelled[win]
  $('#err-rate').textContent = pct(sys.error[win], all)
  const byStatus = sys.errorsByStatus.filter((e) => e.n[win] > 0)
  $('#errors').innerHTML =
    byStatus.length === 0
      ? '<tr><td class="none">no errors in this window</td></tr>'
      : `<tr><th>status</th><th>requests</th><th>share of all</th></tr>${byStatus
          .map((e) => {
            const note = STATUS_NOTE[e.status] || (e.status >= 500 ? 'upstream' : e.status >= 400 ? 'client' : '')
            return `<tr data-status="${e.status}"><td>${e.status === 0 ? '' : e.status} <small>${esc(note)}</small></td><td>${num(e.n[win])}</td><td>${pct(e.n[win], all)}</td></tr>`
          })
          .join('')}`
  const types = sys.errorsByType.filter((e) => e.n[win] > 0)
  $('#error-types').innerHTML =
    types.length === 0
      ? '<tr><td class="none">no failures in this window</td></tr>'
      : `<tr><th>error_type</th><th>requests</th><th>share of all</th></tr>${types
          .map(
            (e) =>
              `<tr data-error-type="${esc(e.type)}"><td>${esc(e.type)}</td><td>${num(e.n[win])}</td><td>${pct(e.n[win], all)}</td></tr>`,
          )
          .join('')}`
  $('#slo-panel').hidden = msg.slo.length === 0
  $('#slo').innerHTML = `<tr><th>route</th><th>goodput</th><th>met</th><th>missed</th></tr>${msg.slo
    .map(
      (r) =>
        `<tr data-slo-route="${esc(r.route)}"><td>${esc(r.route)}</td><td>${pct(r.met[win], r.met[win] + r.missed[win])}</td><td>${num(r.met[win])}</td><td>${num(r.missed[win])}</td></tr>`,
    )
    .join('')}`
  renderSpend(msg.spend)
  const p = msg.process
  if (p) {
    $('#inst').innerHTML =
      `<b>${esc(p.instance)}</b> · pid ${p.pid} · tokentap <b>${esc(p.version)}</b> · Node ${esc(p.node)} · up ` +
      (p.uptime >= 3600 ? `${(p.uptime / 3600).toFixed(1)} h` : `${Math.round(p.uptime / 60)} min`)
    $('#proc').innerHTML =
      `<tr><td>CPU, share of one core</td><td>${p.cpu === null ? '–' : `${(p.cpu / 100).toFixed(1)} %`}</td></tr>` +
      `<tr><td>event-loop delay p99 / max, last second</td><td>${p.loopP99 === null ? '–' : `${(p.loopP99 / 1000).toFixed(1)} / ${((p.loopMax as number) / 1000).toFixed(1)} ms`}</td></tr>` +
      `<tr><td>memory: resident / heap used</td><td>${mb(p.rss)} / ${mb(p.heapUsed)}</td></tr>`
  }
  $('#failures').innerHTML =
    msg.failures.length === 0
      ? '<li class="none">none yet</li>'
      : msg.failures
          .slice()
          .reverse()
          .map(
            (f) =>
              `<li data-failure="${esc(f.id)}"><a href="/debug/requests/${encodeURIComponent(f.id)}" target="_blank" rel="noopener">${esc(f.id)}</a><span class="st">${f.status}</span><small>${esc(f.errorType)}</small> ${esc(f.route)} · ${esc(f.model)} · ${ago(f.ago)}</li>`,
          )
          .join('')
}

// Spend (with pricing: set); * marks a figure an estimated token count went into (docs/cost.md).
function renderSpend(sp: SpendView | undefined): void {
  $('#spend-panel').hidden = !sp
  if (!sp) return
  const money = (v: number): string => `${v >= 1 ? v.toFixed(2) : v.toPrecision(3)} ${esc(sp.currency)}`
  const cell = (r: { spent: number[]; estimated: number[] }): string =>
    `<td>${money(r.spent[win])}${r.estimated[win] > 0 ? ' *' : ''}</td>`
  $('#spend-total').textContent = money(sp.total[win])
  $('#spend').innerHTML =
    `<tr><th>model</th><th>route</th><th>spent</th></tr>${sp.byModel.map((r) => `<tr data-spend-model="${esc(r.model)}"><td>${esc(r.model)}</td><td>${esc(r.route)}</td>${cell(r)}</tr>`).join('')}` +
    (sp.byTenant.length === 0
      ? ''
      : `<tr><th>tenant</th><th></th><th>spent</th></tr>${sp.byTenant.map((r) => `<tr data-spend-tenant="${esc(r.tenant)}"><td>${esc(r.tenant)}</td><td></td>${cell(r)}</tr>`).join('')}`)
}

// Realtime (WebSocket) sessions: one row per route and model over the chosen window, and the sessions open now.
function renderRealtime(rt: RealtimeMessage | undefined): void {
  if (!rt || (rt.open === 0 && rt.series.length === 0)) return
  $('#realtime').hidden = false
  $('#rt-open').textContent = `(${rt.open} open)`
  const o = win * 4
  let h =
    '<tr><th>route · model</th><th>sessions ended</th><th>ok</th><th>error</th><th>cancelled</th><th>TTFT p50</th><th>TTFT p95</th><th>first audio p50</th><th>first audio p95</th><th>ITL p50</th><th>ITL p99</th><th>underrun p95</th><th>audio &gt; 250 ms silent</th></tr>'
  for (const s of rt.series) {
    h +=
      `<tr data-rt-series="${esc(`${s.route} · ${s.model}`)}"><td>${esc(s.route)} · ${esc(s.model)} <small>${esc(s.provider)}</small></td>` +
      `<td>${num(s.sessions[win])}</td><td>${num(s.ok[win])}</td><td>${num(s.error[win])}</td><td>${num(s.cancelled[win])}</td>` +
      fmt(s.q.ttft[o], 'ms') +
      fmt(s.q.ttft[o + 1], 'ms') +
      fmt(s.q.ttfa[o], 'ms') +
      fmt(s.q.ttfa[o + 1], 'ms') +
      fmt(s.q.itl[o], 'ms') +
      fmt(s.q.itl[o + 2], 'ms') +
      fmt(s.q.underrun[o + 1], 'ms') +
      `<td>${s.audio[win] > 0 ? `${Math.round((100 * s.noticeable[win]) / s.audio[win])} %` : '–'}</td></tr>`
  }
  $('#rt-series').innerHTML = h
  $('#rt-sessions').innerHTML = rt.sessions
    .map(
      (x) =>
        `<span data-rt-session="${esc(x.id)}">${esc(x.route)} · ${esc(x.model || '?')} · ${esc(x.id)} <b>${(x.age / 1000).toFixed(0)} s</b>${x.responses > 0 ? ' answering' : ''}</span>`,
    )
    .join('')
}

// The message carries whole µs and parts per 10,000 (live-message.ts); the page works in ms and fractions.
const US = 1000
const msOf = (v: number | null): number | null => (v === null ? null : v / US)
/** Quantile lists [p50, p95, p99, count] × windows: every value but the counts to ms. */
function decodeQuantiles(q: (number | null)[]): void {
  for (let i = 0; i < q.length; i++) if (i % 4 !== 3) q[i] = msOf(q[i])
}
function decode(msg: LiveMessage): LiveMessage {
  msg.now /= US
  for (const s of msg.series) {
    for (const m of ['ttft', 'itl', 'tpot', 'e2e', 'headers'] as const) decodeQuantiles(s.q[m])
    if (s.dist) {
      s.dist.zero /= 10000
      s.dist.x = s.dist.x.map((v) => v / US)
      s.dist.y = s.dist.y.map((v) => v / 10000)
    }
  }
  for (const b of msg.routes) {
    for (const band of b.length.concat(b.concurrency)) {
      band.itl[0] = msOf(band.itl[0])
      band.itl[1] = msOf(band.itl[1])
      band.tpot[0] = msOf(band.tpot[0])
      band.tpot[1] = msOf(band.tpot[1])
    }
    for (const band of b.input) {
      band.ttft[0] = msOf(band.ttft[0])
      band.ttft[1] = msOf(band.ttft[1])
    }
  }
  if (msg.realtime) {
    for (const s of msg.realtime.series)
      for (const m of ['ttft', 'ttfa', 'itl', 'underrun'] as const) decodeQuantiles(s.q[m])
    for (const x of msg.realtime.sessions) x.age /= US
  }
  for (const f of msg.failures) f.ago /= US
  for (const s of msg.streams) {
    s.t0 /= US
    s.ttft = msOf(s.ttft)
    s.gap /= US
    s.maxGap /= US
    s.ticks = s.ticks.map((v) => v / US)
  }
  return msg
}

function connect(): void {
  const es = new EventSource('/live/events')
  es.onopen = () => {
    const c = $('#conn')
    c.dataset.conn = 'open'
    c.textContent = 'live'
  }
  es.onerror = () => {
    const c = $('#conn')
    c.dataset.conn = 'closed'
    c.textContent = 'reconnecting…'
  }
  es.onmessage = (ev: MessageEvent<string>) => {
    const msg = decode(JSON.parse(ev.data) as LiveMessage)
    offset = msg.now - performance.now()
    stallMs = msg.stallSeconds * 1000
    last = msg
    updateStreams(msg)
    render(msg)
    document.body.dataset.messages = String(Number(document.body.dataset.messages || 0) + 1)
  }
}
connect()
