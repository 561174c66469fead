/**
 * The live page: one HTML document and one script, served as they are (no build step), with
 * uPlot from node_modules. Kept as strings here so `tsc` carries them into dist/ with the rest.
 * The script draws what /live/events sends (see live-message.ts for the shape); it writes no
 * template literals, so it can live inside one.
 */

export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tokentap · live</title>
<link rel="stylesheet" href="/live/uplot.css">
<style>
  :root { --bg: #0f1419; --panel: #171d24; --line: #2a333d; --text: #d8dee6; --dim: #8a96a3; --ok: #4cc38a; --err: #ef5a5a; --can: #e0a243; --tick: #6cb6ff; --stall: #ff5c5c; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background: var(--bg); color: var(--text); }
  header { display: flex; align-items: center; gap: 18px; padding: 10px 18px; border-bottom: 1px solid var(--line); }
  h1 { font-size: 17px; margin: 0; font-weight: 600; } h1 span { color: var(--tick); font-weight: 400; }
  h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .06em; color: var(--dim); margin: 0 0 8px; font-weight: 600; }
  #conn { font-size: 12px; color: var(--dim); } #conn[data-conn="open"]::before { content: "● "; color: var(--ok); } #conn[data-conn="closed"]::before { content: "● "; color: var(--err); }
  .windows { margin-left: auto; display: flex; gap: 4px; align-items: center; color: var(--dim); }
  .windows button { background: var(--panel); color: var(--text); border: 1px solid var(--line); border-radius: 4px; padding: 3px 9px; cursor: pointer; font: inherit; }
  .windows button.on { border-color: var(--tick); color: var(--tick); }
  main { padding: 14px 18px; display: grid; gap: 16px; grid-template-columns: minmax(0, 1fr); align-items: start; }
  .col { display: grid; gap: 16px; min-width: 0; grid-template-columns: minmax(0, 1fr); }
  /* A wide screen: the streams and routes on the left, the service's health on the right. */
  @media (min-width: 1200px) { main { grid-template-columns: minmax(0, 1fr) minmax(360px, 40%); } }
  a { color: var(--tick); }
  .side table td:first-child { white-space: normal; }
  #inst { color: var(--dim); } #inst b { color: var(--text); font-weight: 600; }
  #failures { list-style: none; margin: 0; padding: 0; font-variant-numeric: tabular-nums; }
  #failures li { padding: 3px 0; border-bottom: 1px solid var(--line); } #failures .st { color: var(--err); font-weight: 600; margin: 0 6px; }
  .summary { display: flex; gap: 10px; flex-wrap: wrap; }
  .stat { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 110px; }
  .stat b { display: block; font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; } .stat span { color: var(--dim); font-size: 12px; }
  .stat.ok b { color: var(--ok); } .stat.error b { color: var(--err); } .stat.cancelled b { color: var(--can); }
  .panel { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 12px; }
  #strip { width: 100%; display: block; }
  #stalls { display: flex; flex-wrap: wrap; gap: 6px; margin-top: 8px; }
  .stall-marker { background: rgba(255,92,92,.12); border: 1px solid var(--stall); color: #ffb3b3; border-radius: 4px; padding: 2px 8px; font-size: 12px; }
  #routes { display: grid; gap: 16px; grid-template-columns: minmax(0, 1fr); }
  .card { min-width: 0; overflow-x: auto; background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 12px 14px; }
  .card > h3 { margin: 0 0 10px; font-size: 15px; } .card > h3 small { color: var(--dim); font-weight: 400; margin-left: 8px; }
  .models { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(520px, 100%), 1fr)); gap: 14px; }
  .model { border: 1px solid var(--line); border-radius: 5px; padding: 10px; }
  .model h4 { margin: 0 0 6px; font-size: 13px; } .model h4 small { color: var(--dim); font-weight: 400; }
  .counts { display: flex; gap: 12px; margin-bottom: 6px; color: var(--dim); font-variant-numeric: tabular-nums; } .counts b { color: var(--text); font-weight: 600; }
  .counts .ok b { color: var(--ok); } .counts .error b { color: var(--err); } .counts .cancelled b { color: var(--can); } .counts .stalls b { color: var(--stall); }
  table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
  th, td { text-align: right; padding: 2px 6px; border-bottom: 1px solid var(--line); white-space: nowrap; } th:first-child, td:first-child { text-align: left; }
  th { color: var(--dim); font-weight: 500; font-size: 12px; } td.none { color: var(--dim); }
  .bands { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(440px, 100%), 1fr)); gap: 14px; margin-top: 12px; }
  .dist { margin-top: 8px; } .dist .cap { color: var(--dim); font-size: 12px; }
  .empty { color: var(--dim); }
  .u-legend { display: none; }
</style>
</head>
<body>
<header>
  <h1>tokentap <span>live</span></h1>
  <div id="conn" data-conn="connecting">connecting…</div>
  <div class="windows">window <button data-w="0" class="on">1 min</button><button data-w="1">5 min</button><button data-w="2">15 min</button></div>
</header>
<main>
<div class="col">
  <section class="summary" id="system">
    <div class="stat"><b id="inflight">0</b><span>streams in flight</span></div>
    <div class="stat"><b id="sys-tps">0</b><span>output tokens/s, system</span></div>
    <div class="stat ok"><b data-count="ok">0</b><span>ok</span></div>
    <div class="stat error"><b data-count="error">0</b><span>error</span></div>
    <div class="stat cancelled"><b data-count="cancelled">0</b><span>cancelled</span></div>
    <div class="stat error"><b id="err-rate">–</b><span>error rate</span></div>
  </section>
  <section class="panel">
    <h2>Streams in flight <span id="strip-cap" style="text-transform:none;letter-spacing:0;font-weight:400"></span></h2>
    <canvas id="strip" height="60"></canvas>
    <div id="stalls"></div>
  </section>
  <section id="routes"><div class="empty">No finished requests yet.</div></section>
  <section class="panel" id="realtime" hidden>
    <h2>Realtime sessions <span id="rt-open" style="text-transform:none;letter-spacing:0;font-weight:400"></span></h2>
    <table id="rt-series"></table>
    <div id="rt-sessions" class="counts" style="flex-wrap:wrap;margin-top:8px"></div>
  </section>
</div>
<aside class="col side">
  <section class="panel"><h2>Instance</h2><div id="inst">–</div></section>
  <section class="panel"><h2>Errors by status</h2><table id="errors"><tr><td class="none">no errors in this window</td></tr></table></section>
  <section class="panel"><h2>Failures by who is to blame</h2><table id="error-types"><tr><td class="none">no failures in this window</td></tr></table></section>
  <section class="panel" id="slo-panel" hidden><h2>SLO goodput</h2><table id="slo"></table></section>
  <section class="panel"><h2>Process</h2><table id="proc"></table></section>
  <section class="panel"><h2>Recent failures</h2><ul id="failures"><li class="none">none yet</li></ul></section>
</aside>
</main>
<script src="/live/uplot.js"></script>
<script src="/live/app.js"></script>
</body>
</html>
`

export const PAGE_SCRIPT = String.raw`'use strict'
;(function () {
  var STRIP_MS = 30000, FADE_MS = 10000, ROW = 20, LABEL = 250
  var win = 0, last = null, offset = 0, stallMs = 1000
  var rows = new Map(), cards = new Map(), models = new Map(), markers = []
  var $ = function (sel) { return document.querySelector(sel) }
  var esc = function (s) { return String(s).replace(/[&<>"']/g, function (c) { return '&#' + c.charCodeAt(0) + ';' }) }
  var fmt = function (v, unit) {
    if (v === null || v === undefined) return '<td class="none">–</td>'
    var s = v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)
    return '<td>' + s + (unit ? ' ' + unit : '') + '</td>'
  }
  var num = function (v) { return v >= 1000 ? (v / 1000).toFixed(1) + 'k' : String(Math.round(v * 10) / 10) }
  var serverNow = function () { return performance.now() + offset }
  var key = function (route, model) { return route + '\u0000' + model }

  document.querySelectorAll('.windows button').forEach(function (b) {
    b.addEventListener('click', function () {
      win = Number(b.dataset.w)
      document.querySelectorAll('.windows button').forEach(function (o) { o.classList.toggle('on', o === b) })
      if (last) render(last)
    })
  })

  function addMarker(id, text) {
    var el = document.createElement('div')
    el.className = 'stall-marker'
    el.dataset.id = id
    el.textContent = text
    $('#stalls').prepend(el)
    markers.push(el)
    if (markers.length > 12) markers.shift().remove()
    return el
  }

  // The strip: one row per stream, oldest first; ticks are content chunks, red spans are stalls.
  function updateStreams(msg) {
    var seen = new Set()
    msg.streams.forEach(function (s) {
      seen.add(s.id)
      var r = rows.get(s.id)
      if (!r) {
        r = { id: s.id, label: s.route + ' · ' + (s.model || '?'), t0: s.t0, ticks: [], k: [], stalls: 0, marker: null, live: null, ended: 0 }
        rows.set(s.id, r)
      }
      for (var i = 0; i < s.ticks.length; i++) { r.ticks.push(s.ticks[i]); r.k.push(s.k ? s.k[i] : 1) }
      if (r.ticks.length > 6000) { r.ticks.splice(0, r.ticks.length - 6000); r.k.splice(0, r.k.length - 6000) }
      r.chunks = s.chunks; r.tokens = s.tokens; r.gap = s.gap; r.ended = s.ended ? r.ended || performance.now() : 0
      if (s.gap > stallMs) {
        var text = '⚠ stalling ' + (s.gap / 1000).toFixed(2) + ' s · ' + r.label + ' · ' + s.id
        if (!r.live) r.live = addMarker(s.id, text)
        else r.live.textContent = text
      }
      if (s.stalls > r.stalls) {
        if (r.live) { r.live.remove(); r.live = null }
        addMarker(s.id, '⚠ stall ' + (s.maxGap / 1000).toFixed(2) + ' s · ' + r.label + ' · ' + s.id)
        r.stalls = s.stalls
      } else if (r.live && s.gap <= stallMs) {
        r.live.textContent = r.live.textContent.replace('stalling', 'stall')
        r.live = null
      }
    })
    var now = performance.now()
    rows.forEach(function (r, id) {
      if (seen.has(id) || r.ended) return
      r.ended = now
      if (r.live) { r.live.textContent = r.live.textContent.replace('stalling', 'stall'); r.live = null }
    })
    $('#strip-cap').textContent = msg.omittedStreams > 0 ? '(oldest ' + msg.streams.length + ' of ' + msg.system.inFlight + ')' : ''
  }

  function drawStrip() {
    var canvas = $('#strip'), now = performance.now(), sNow = serverNow()
    rows.forEach(function (r, id) { if (r.ended && now - r.ended > FADE_MS) rows.delete(id) })
    var width = canvas.clientWidth, n = Math.max(rows.size, 1), height = n * ROW + 22
    var dpr = window.devicePixelRatio || 1
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr); canvas.height = Math.round(height * dpr); canvas.style.height = height + 'px'
    }
    var ctx = canvas.getContext('2d')
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0)
    ctx.clearRect(0, 0, width, height)
    var plotW = width - LABEL - 8
    var x = function (t) { return LABEL + plotW - ((sNow - t) / STRIP_MS) * plotW }
    ctx.font = '11px system-ui, sans-serif'
    ctx.fillStyle = '#8a96a3'
    ctx.strokeStyle = '#2a333d'
    for (var s = 0; s <= 30; s += 5) {
      var gx = LABEL + plotW - (s / 30) * plotW
      ctx.beginPath(); ctx.moveTo(gx, 0); ctx.lineTo(gx, height - 18); ctx.stroke()
      ctx.fillText(s === 0 ? 'now' : '−' + s + ' s', gx - (s === 0 ? 22 : 12), height - 5)
    }
    if (rows.size === 0) { ctx.fillText('no streams in flight', 8, 14); return }
    var i = 0
    rows.forEach(function (r) {
      var y = i * ROW + 2, mid = y + ROW / 2
      ctx.globalAlpha = r.ended ? Math.max(0.08, 1 - (now - r.ended) / FADE_MS) : 1
      ctx.fillStyle = '#d8dee6'
      ctx.fillText((r.label + ' · ' + r.id).slice(0, 42), 6, mid + 4)
      var prev = null
      for (var j = 0; j < r.ticks.length; j++) {
        var t = r.t0 + r.ticks[j]
        if (prev !== null && t - prev > stallMs) {
          ctx.fillStyle = 'rgba(255,92,92,.35)'
          ctx.fillRect(Math.max(LABEL, x(prev)), y + 3, x(t) - Math.max(LABEL, x(prev)), ROW - 6)
        }
        prev = t
        var px = x(t)
        if (px < LABEL) continue
        var h = Math.min(ROW - 4, 8 + 3 * Math.log2(r.k[j] || 1))
        ctx.fillStyle = r.k[j] > 1 ? '#b38cff' : '#6cb6ff'
        ctx.fillRect(px, mid - h / 2, 1.5, h)
      }
      // A stall in progress: from the last chunk to now.
      var lastT = prev === null ? r.t0 : prev
      if (!r.ended && sNow - lastT > stallMs) {
        ctx.fillStyle = 'rgba(255,92,92,.5)'
        ctx.fillRect(Math.max(LABEL, x(lastT)), y + 3, x(sNow) - Math.max(LABEL, x(lastT)), ROW - 6)
      }
      i++
    })
    ctx.globalAlpha = 1
  }
  setInterval(drawStrip, 100)

  function qRow(name, q, unit) {
    var o = win * 4
    return '<tr><td>' + name + '</td>' + fmt(q[o], unit) + fmt(q[o + 1], unit) + fmt(q[o + 2], unit) + '<td>' + num(q[o + 3]) + '</td></tr>'
  }

  function bandTable(title, bands, unitNote) {
    var h = '<table><tr><th>' + title + '</th><th>ITL p50</th><th>ITL p99</th><th>tokens</th><th>TPOT p50</th><th>TPOT p99</th><th>requests</th></tr>'
    bands.forEach(function (b) {
      h += '<tr><td>' + esc(b.band) + '</td>' + fmt(b.itl[0], 'ms') + fmt(b.itl[1], 'ms') + '<td>' + num(b.itl[2]) + '</td>' + fmt(b.tpot[0], 'ms') + fmt(b.tpot[1], 'ms') + '<td>' + num(b.tpot[2]) + '</td></tr>'
    })
    return h + '</table>'
  }

  function ttftTable(bands) {
    var h = '<table><tr><th>prompt</th><th>TTFT p50</th><th>TTFT p99</th><th>requests</th></tr>'
    bands.forEach(function (b) {
      if (b.ttft[2] > 0) h += '<tr data-input-band="' + esc(b.band) + '"><td>' + esc(b.band) + '</td>' + fmt(b.ttft[0], 'ms') + fmt(b.ttft[1], 'ms') + '<td>' + num(b.ttft[2]) + '</td></tr>'
    })
    return h + '</table>'
  }

  function card(route) {
    var c = cards.get(route)
    if (c) return c
    var el = document.createElement('article')
    el.className = 'card'
    el.dataset.route = route
    el.innerHTML = '<h3>' + esc(route) + '<small>route</small></h3><div class="models"></div><div class="bands"></div>'
    $('#routes').appendChild(el)
    c = { el: el, models: el.querySelector('.models'), bands: el.querySelector('.bands') }
    cards.set(route, c)
    return c
  }

  // 1, 2, 5 × 10^p inside the range: a readable log axis.
  function logSplits(u, i, min, max) {
    var out = []
    for (var p = Math.floor(Math.log10(min)); p <= Math.ceil(Math.log10(max)); p++) {
      [1, 2, 5].forEach(function (f) { var v = f * Math.pow(10, p); if (v >= min && v <= max) out.push(Number(v.toPrecision(3))) })
    }
    return out.length >= 2 ? out : [min, max]
  }
  function msLabel(v) { if (v === null || v === undefined) return ''; return v >= 1000 ? Number((v / 1000).toPrecision(3)) + ' s' : Number(v.toPrecision(3)) + ' ms' }

  function chart(m, s) {
    var p99 = s.q.itl[6]
    m.p99 = p99
    if (!s.dist || !window.uPlot) return
    m.el.querySelector('.zero').textContent = s.dist.zero > 0 ? '; ' + Math.round(s.dist.zero * 100) + ' % of tokens came 0 ms after the previous chunk (same read)' : ''
    if (s.dist.x.length === 0) return
    // Each bar is one group of bins (≈ 17 % wide); stepped paths hold a value until the next
    // point, so a bar followed by a gap is closed with a 0 at its right edge.
    var xs = [], ys = [], W = 1.1735
    for (var i = 0; i < s.dist.x.length; i++) {
      xs.push(s.dist.x[i]); ys.push(s.dist.y[i])
      if (i === s.dist.x.length - 1 || s.dist.x[i + 1] > s.dist.x[i] * W * 1.01) { xs.push(s.dist.x[i] * W); ys.push(0) }
    }
    var data = [xs, ys]
    if (m.plot) { m.plot.setData(data); return }
    m.plot = new uPlot({
      width: Math.max(300, m.el.clientWidth - 24), height: 130,
      scales: { x: { time: false, distr: 3, log: 10 }, y: { range: [0, null] } },
      axes: [
        { stroke: '#8a96a3', grid: { stroke: '#2a333d' }, splits: logSplits, values: function (u, v) { return v.map(msLabel) } },
        { stroke: '#8a96a3', grid: { stroke: '#2a333d' }, size: 44, values: function (u, v) { return v.map(function (x) { return Math.round(x * 100) + '%' }) } },
      ],
      series: [{}, { label: 'share of tokens', stroke: '#6cb6ff', fill: 'rgba(108,182,255,.25)', paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }],
      cursor: { show: false }, legend: { show: false },
      hooks: { draw: [function (u) {
        if (m.p99 === null || m.p99 === undefined) return
        var cx = u.ctx, px = u.valToPos(m.p99, 'x', true)
        cx.save(); cx.strokeStyle = '#ff5c5c'; cx.lineWidth = 2 * devicePixelRatio; cx.setLineDash([6, 4])
        cx.beginPath(); cx.moveTo(px, u.bbox.top); cx.lineTo(px, u.bbox.top + u.bbox.height); cx.stroke()
        cx.fillStyle = '#ff5c5c'; cx.font = (11 * devicePixelRatio) + 'px system-ui'; cx.fillText('p99 ' + msLabel(m.p99), px + 4 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio)
        cx.restore()
      }] },
    }, data, m.el.querySelector('.dist-plot'))
  }

  function render(msg) {
    var sys = msg.system
    $('#inflight').textContent = sys.inFlight
    $('#sys-tps').textContent = num(sys.tokensPerSecond[win])
    ;['ok', 'error', 'cancelled'].forEach(function (o) { $('[data-count="' + o + '"]').textContent = num(sys[o][win]) })
    renderHealth(msg)
    if (msg.series.length > 0) { var e = $('#routes .empty'); if (e) e.remove() }
    msg.series.forEach(function (s) {
      var c = card(s.route), k = key(s.route, s.model), m = models.get(k)
      if (!m) {
        var el = document.createElement('div')
        el.className = 'model'
        el.dataset.model = s.model
        el.innerHTML = '<h4></h4><div class="counts"></div><table class="q"></table><div class="dist"><div class="cap">ITL distribution, last 5 min, token-weighted; dashed: p99<span class="zero"></span></div><div class="dist-plot"></div></div>'
        c.models.appendChild(el)
        m = { el: el, plot: null, p99: null }
        models.set(k, m)
      }
      m.el.querySelector('h4').innerHTML = esc(s.model) + ' <small>' + esc(s.provider) + '</small>'
      m.el.querySelector('.counts').innerHTML =
        '<span class="ok" data-series-count="ok">ok <b>' + num(s.ok[win]) + '</b></span>' +
        '<span class="error" data-series-count="error">error <b>' + num(s.error[win]) + '</b></span>' +
        '<span class="cancelled" data-series-count="cancelled">cancelled <b>' + num(s.cancelled[win]) + '</b></span>' +
        '<span class="stalls" data-series-count="stalls">stalls <b>' + num(s.stalls[win]) + '</b></span>' +
        '<span>tokens/s <b>' + num(s.tokensPerSecond[win]) + '</b></span>'
      m.el.querySelector('table.q').innerHTML = '<tr><th></th><th>p50</th><th>p95</th><th>p99</th><th>n</th></tr>' +
        qRow('response headers', s.q.headers, 'ms') + qRow('TTFT', s.q.ttft, 'ms') + qRow('ITL', s.q.itl, 'ms') + qRow('TPOT', s.q.tpot, 'ms') + qRow('E2E', s.q.e2e, 'ms') + qRow('tokens/s per user', s.q.tps, '')
      chart(m, s)
    })
    renderRealtime(msg.realtime)
    msg.routes.forEach(function (b) {
      var streamed = b.clients.streamed[win]
      var slow = b.clients.slow[win]
      card(b.route).bands.innerHTML = '<div><h2>By output length, last 5 min</h2>' + bandTable('length', b.length) + '</div>' +
        '<div><h2>By concurrency at start, last 5 min</h2>' + bandTable('in flight', b.concurrency) + '</div>' +
        '<div><h2>TTFT by prompt length (input tokens), last 5 min</h2>' + ttftTable(b.input) + '</div>' +
        '<div data-slow-clients="' + slow + '/' + streamed + '">Slow clients (bytes waited &gt; 100 ms for the client socket): <b>' +
        (streamed > 0 ? Math.round((100 * slow) / streamed) + ' %' : '–') + '</b> of ' + num(streamed) + ' streamed requests</div>'
    })
  }

  var pct = function (part, all) { return all > 0 ? (Math.round((1000 * part) / all) / 10) + ' %' : '–' }
  var ago = function (ms) { return ms >= 60000 ? Math.round(ms / 60000) + ' min ago' : Math.round(ms / 1000) + ' s ago' }
  var mb = function (bytes) { return (bytes / 1048576).toFixed(0) + ' MB' }
  var STATUS_NOTE = { 0: 'other codes', 200: 'error inside the stream', 499: 'client closed', 502: 'upstream unreachable or bad answer', 504: 'upstream timed out' }

  // The service's health, for the right-hand column: error rate and errors by status over the
  // chosen window, goodput per route with an SLO, the process's own figures, the newest failures.
  function renderHealth(msg) {
    var sys = msg.system, all = sys.ok[win] + sys.error[win] + sys.cancelled[win]
    $('#err-rate').textContent = pct(sys.error[win], all)
    var rows = sys.errorsByStatus.filter(function (e) { return e.n[win] > 0 })
    $('#errors').innerHTML = rows.length === 0 ? '<tr><td class="none">no errors in this window</td></tr>' :
      '<tr><th>status</th><th>requests</th><th>share of all</th></tr>' + rows.map(function (e) {
        var note = STATUS_NOTE[e.status] || (e.status >= 500 ? 'upstream' : e.status >= 400 ? 'client' : '')
        return '<tr data-status="' + e.status + '"><td>' + (e.status === 0 ? '' : e.status) + ' <small>' + esc(note) + '</small></td><td>' + num(e.n[win]) + '</td><td>' + pct(e.n[win], all) + '</td></tr>'
      }).join('')
    var types = sys.errorsByType.filter(function (e) { return e.n[win] > 0 })
    $('#error-types').innerHTML = types.length === 0 ? '<tr><td class="none">no failures in this window</td></tr>' :
      '<tr><th>error_type</th><th>requests</th><th>share of all</th></tr>' + types.map(function (e) {
        return '<tr data-error-type="' + esc(e.type) + '"><td>' + esc(e.type) + '</td><td>' + num(e.n[win]) + '</td><td>' + pct(e.n[win], all) + '</td></tr>'
      }).join('')
    $('#slo-panel').hidden = msg.slo.length === 0
    $('#slo').innerHTML = '<tr><th>route</th><th>goodput</th><th>met</th><th>missed</th></tr>' + msg.slo.map(function (r) {
      return '<tr data-slo-route="' + esc(r.route) + '"><td>' + esc(r.route) + '</td><td>' + pct(r.met[win], r.met[win] + r.missed[win]) + '</td><td>' + num(r.met[win]) + '</td><td>' + num(r.missed[win]) + '</td></tr>'
    }).join('')
    var p = msg.process
    if (p) {
      $('#inst').innerHTML = '<b>' + esc(p.instance) + '</b> · pid ' + p.pid + ' · tokentap <b>' + esc(p.version) + '</b> · Node ' + esc(p.node) + ' · up ' + (p.uptime >= 3600 ? (p.uptime / 3600).toFixed(1) + ' h' : Math.round(p.uptime / 60) + ' min')
      $('#proc').innerHTML = '<tr><td>CPU, share of one core</td><td>' + (p.cpu === null ? '–' : (p.cpu / 100).toFixed(1) + ' %') + '</td></tr>' +
        '<tr><td>event-loop delay p99 / max, last second</td><td>' + (p.loopP99 === null ? '–' : (p.loopP99 / 1000).toFixed(1) + ' / ' + (p.loopMax / 1000).toFixed(1) + ' ms') + '</td></tr>' +
        '<tr><td>memory: resident / heap used</td><td>' + mb(p.rss) + ' / ' + mb(p.heapUsed) + '</td></tr>'
    }
    $('#failures').innerHTML = msg.failures.length === 0 ? '<li class="none">none yet</li>' : msg.failures.slice().reverse().map(function (f) {
      return '<li data-failure="' + esc(f.id) + '"><a href="/debug/requests/' + encodeURIComponent(f.id) + '" target="_blank" rel="noopener">' + esc(f.id) + '</a><span class="st">' + f.status + '</span><small>' + esc(f.errorType) + '</small> ' + esc(f.route) + ' · ' + esc(f.model) + ' · ' + ago(f.ago) + '</li>'
    }).join('')
  }

  // Realtime (WebSocket) sessions: one row per route and model over the chosen window, and the sessions open now.
  function renderRealtime(rt) {
    if (!rt || (rt.open === 0 && rt.series.length === 0)) return
    $('#realtime').hidden = false
    $('#rt-open').textContent = '(' + rt.open + ' open)'
    var o = win * 4
    var h = '<tr><th>route · model</th><th>sessions ended</th><th>ok</th><th>error</th><th>cancelled</th><th>TTFT p50</th><th>TTFT p95</th><th>first audio p50</th><th>first audio p95</th><th>ITL p50</th><th>ITL p99</th><th>underrun p95</th><th>audio &gt; 250 ms silent</th></tr>'
    rt.series.forEach(function (s) {
      h += '<tr data-rt-series="' + esc(s.route + ' · ' + s.model) + '"><td>' + esc(s.route) + ' · ' + esc(s.model) + ' <small>' + esc(s.provider) + '</small></td>' +
        '<td>' + num(s.sessions[win]) + '</td><td>' + num(s.ok[win]) + '</td><td>' + num(s.error[win]) + '</td><td>' + num(s.cancelled[win]) + '</td>' +
        fmt(s.q.ttft[o], 'ms') + fmt(s.q.ttft[o + 1], 'ms') + fmt(s.q.ttfa[o], 'ms') + fmt(s.q.ttfa[o + 1], 'ms') + fmt(s.q.itl[o], 'ms') + fmt(s.q.itl[o + 2], 'ms') + fmt(s.q.underrun[o + 1], 'ms') +
        '<td>' + (s.audio[win] > 0 ? Math.round((100 * s.noticeable[win]) / s.audio[win]) + ' %' : '–') + '</td></tr>'
    })
    $('#rt-series').innerHTML = h
    $('#rt-sessions').innerHTML = rt.sessions.map(function (x) {
      return '<span data-rt-session="' + esc(x.id) + '">' + esc(x.route) + ' · ' + esc(x.model || '?') + ' · ' + esc(x.id) + ' <b>' + (x.age / 1000).toFixed(0) + ' s</b>' + (x.responses > 0 ? ' answering' : '') + '</span>'
    }).join('')
  }

  // The message carries times and durations in whole µs and shares per 10,000 (cheaper for the
  // proxy to serialise, live-message.ts); the page works in ms and fractions.
  var US = 1000
  var msOf = function (v) { return v === null ? null : v / US }
  function decode(msg) {
    msg.now /= US
    msg.series.forEach(function (s) {
      ;['ttft', 'itl', 'tpot', 'e2e', 'headers'].forEach(function (m) {
        var q = s.q[m]
        for (var i = 0; i < q.length; i++) if (i % 4 !== 3) q[i] = msOf(q[i])
      })
      if (s.dist) {
        s.dist.zero /= 10000
        s.dist.x = s.dist.x.map(function (v) { return v / US })
        s.dist.y = s.dist.y.map(function (v) { return v / 10000 })
      }
    })
    msg.routes.forEach(function (b) {
      b.length.concat(b.concurrency).forEach(function (band) {
        band.itl[0] = msOf(band.itl[0]); band.itl[1] = msOf(band.itl[1])
        band.tpot[0] = msOf(band.tpot[0]); band.tpot[1] = msOf(band.tpot[1])
      })
      ;(b.input || []).forEach(function (band) { band.ttft[0] = msOf(band.ttft[0]); band.ttft[1] = msOf(band.ttft[1]) })
    })
    if (msg.realtime) {
      msg.realtime.series.forEach(function (s) {
        ;['ttft', 'ttfa', 'itl', 'underrun'].forEach(function (m) {
          var q = s.q[m]
          for (var i = 0; i < q.length; i++) if (i % 4 !== 3) q[i] = msOf(q[i])
        })
      })
      msg.realtime.sessions.forEach(function (x) { x.age /= US })
    }
    msg.failures.forEach(function (f) { f.ago /= US })
    msg.streams.forEach(function (s) {
      s.t0 /= US; s.ttft = msOf(s.ttft); s.gap /= US; s.maxGap /= US
      s.ticks = s.ticks.map(function (v) { return v / US })
    })
    return msg
  }

  function connect() {
    var es = new EventSource('/live/events')
    es.onopen = function () { var c = $('#conn'); c.dataset.conn = 'open'; c.textContent = 'live' }
    es.onerror = function () { var c = $('#conn'); c.dataset.conn = 'closed'; c.textContent = 'reconnecting…' }
    es.onmessage = function (ev) {
      var msg = decode(JSON.parse(ev.data))
      offset = msg.now - performance.now()
      stallMs = msg.stallSeconds * 1000
      last = msg
      updateStreams(msg)
      render(msg)
      document.body.dataset.messages = String(Number(document.body.dataset.messages || 0) + 1)
    }
  }
  connect()
})()
`
