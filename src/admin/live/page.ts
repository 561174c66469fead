/** The live page's HTML; its script is built from client/app.ts and served with uPlot by register-live.ts. */

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
  <section class="panel" id="spend-panel" hidden><h2>Spend <span id="spend-total" style="text-transform:none;letter-spacing:0;font-weight:400"></span></h2><table id="spend"></table></section>
  <section class="panel"><h2>Process</h2><table id="proc"></table></section>
  <section class="panel"><h2>Recent failures</h2><ul id="failures"><li class="none">none yet</li></ul></section>
</aside>
</main>
<script src="/live/uplot.js"></script>
<script src="/live/app.js"></script>
</body>
</html>
`
