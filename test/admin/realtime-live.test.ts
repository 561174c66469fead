import t from 'tap'
import { openChromium } from '../helpers/browser.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { eventually, respond, tapedClient } from '../helpers/realtime.ts'
import type { TapedClient } from '../helpers/realtime.ts'

/**
 * Realtime sessions on the live views: `/live/events` carries the open sessions and the
 * per-route-and-model figures, `/debug/requests/{id}` a finished session with its responses,
 * and the live page shows them (Debian's Chromium).
 */

/** The first message of the live event stream. */
async function firstEvent(url: string): Promise<Record<string, unknown>> {
  const ac = new AbortController()
  const res = await fetch(url, { signal: ac.signal })
  const reader = (res.body as ReadableStream<Uint8Array>).getReader()
  let text = ''
  for (;;) {
    const { value } = await reader.read()
    text += Buffer.from(value ?? new Uint8Array()).toString('utf8')
    const m = /data: (.*)\n\n/.exec(text)
    if (m !== null) {
      ac.abort()
      return JSON.parse(m[1]) as Record<string, unknown>
    }
  }
}

/** A session on the simulator, with the given id; `responses` answered responses of 3 audio steps. */
async function session(url: string, id: string, responses: number): Promise<TapedClient> {
  const c = tapedClient(`${url.replace('http', 'ws')}/sim/v1/realtime?model=gpt-realtime`, { headers: { 'x-request-id': id } })
  await c.opened
  for (let i = 1; i <= responses; i++)
    await respond(
      c,
      {
        ttft_ms: 5,
        first_tokens: 1,
        chunks: [
          [5, 1],
          [5, 2],
        ],
        audio_ms_per_token: 30,
      },
      i,
    )
  return c
}

t.test('the live events carry open sessions and the realtime figures; /debug/requests/{id} a finished session with its responses', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const open = await session(proxy.url, 'voice-open', 1)
  const done = await session(proxy.url, 'voice-1', 2)
  done.ws.close(1000, 'bye')
  await done.closed
  await eventually('the session record', () => proxy.app.tokentap.realtime.open.size === 1)
  const msg = (await firstEvent(`${proxy.adminUrl}/live/events`)) as {
    realtime: {
      open: number
      sessions: { id: string; route: string; model: string }[]
      series: { route: string; model: string; sessions: number[]; ok: number[]; audio: number[]; q: Record<string, (number | null)[]> }[]
    }
  }
  t.equal(msg.realtime.open, 1)
  t.match(msg.realtime.sessions, [{ id: 'voice-open', route: '/sim', model: 'gpt-realtime' }])
  t.equal(msg.realtime.series.length, 1)
  const s = msg.realtime.series[0]
  t.match(s, { route: '/sim', model: 'gpt-realtime', sessions: [1, 1, 1], ok: [3, 3, 3], audio: [3, 3, 3] })
  t.equal(s.q.ttft[3], 3, 'three TTFTs in the last minute')
  t.ok((s.q.ttft[0] as number) > 0, 'TTFT p50 in µs')
  t.equal(s.q.itl[3], 9, 'ITL counts tokens: (1 + 2) × 3 responses')

  const view = (await (await fetch(`${proxy.adminUrl}/debug/requests/voice-1`)).json()) as Record<string, unknown> & { responses: Record<string, unknown>[] }
  t.match(view, {
    request_id: 'voice-1',
    kind: 'realtime_session',
    route: '/sim',
    provider: 'openai',
    model: 'gpt-realtime',
    status: 101,
    outcome: 'ok',
    close_code: 1000,
    close_reason: 'bye',
    closed_by: 'client',
    response_count: 2,
  })
  t.equal(view.responses.length, 2)
  t.match(view.responses[0], { outcome: 'ok', text_deltas: 3, audio_deltas: 3, streamed_tokens: 4, audio_ms: 120, usage: { output_text: 4 } })
  t.ok((view.responses[0].ttft_ms as number) > 0 && (view.responses[0].ttfa_ms as number) > 0)
  t.notMatch(JSON.stringify(view), /x-request-id|authorization/i, 'no headers')
  const missing = await fetch(`${proxy.adminUrl}/debug/requests/voice-open`)
  t.equal(missing.status, 404, 'an open session is not finished yet')
  open.ws.close(1000)
  await open.closed
})

t.test('the live page shows the realtime sessions in Chromium', async (t) => {
  const chromium = await openChromium(t)
  if (chromium === undefined) return
  const { page } = chromium
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const errors: string[] = []
  page.on('pageerror', (err) => errors.push(err.message))
  await page.goto(`${proxy.adminUrl}/`)
  await page.waitForSelector('#conn[data-conn="open"]', { timeout: 15_000 })
  t.equal(await page.locator('#realtime').isHidden(), true, 'no realtime section before any session')
  const c = await session(proxy.url, 'voice-page', 2)
  await page.waitForSelector('[data-rt-session="voice-page"]', { timeout: 15_000 })
  await page.waitForSelector('[data-rt-series="/sim · gpt-realtime"]', { timeout: 15_000 })
  const row = page.locator('[data-rt-series="/sim · gpt-realtime"] td')
  t.equal(await row.nth(2).textContent(), '2', 'two ok responses')
  const ttft = (await row.nth(5).textContent()) ?? ''
  t.ok(/ ms$/.test(ttft) && Number.parseFloat(ttft) > 0 && Number.parseFloat(ttft) < 5000, `TTFT p50 in ms: ${ttft}`)
  c.ws.close(1000)
  await c.closed
  await page.waitForFunction(() => document.querySelector('#rt-open')?.textContent === '(0 open)', undefined, { timeout: 15_000 })
  t.same(errors, [], 'no script errors on the page')
})
