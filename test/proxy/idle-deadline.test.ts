import t from 'tap'
import { IdleDeadline } from '../../src/proxy/idle-deadline.ts'
import type { IdleTimers } from '../../src/proxy/idle-deadline.ts'

/**
 * Hand-stepped timers: time is an input. `advance(to)` moves the clock and runs every timer due
 * by then, in order; `armed` lists each delay the deadline asked for.
 */
function steppedTimers(): IdleTimers & { advance(to: number): void; armed: number[]; pending(): number } {
  let now = 0
  const timers = new Map<object, { due: number; fn: () => void }>()
  const armed: number[] = []
  return {
    now: () => now,
    setTimeout(fn, ms) {
      armed.push(ms)
      const handle = { unref: () => handle } as unknown as NodeJS.Timeout
      timers.set(handle, { due: now + ms, fn })
      return handle
    },
    clearTimeout(handle) {
      timers.delete(handle)
    },
    advance(to) {
      for (;;) {
        let next: [object, { due: number; fn: () => void }] | undefined
        for (const e of timers) if (e[1].due <= to && (next === undefined || e[1].due < next[1].due)) next = e
        if (next === undefined) break
        timers.delete(next[0])
        now = next[1].due
        next[1].fn()
      }
      now = to
    },
    armed,
    pending: () => timers.size,
  }
}

t.test('silence of the full limit after the head ends the exchange once', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const d = new IdleDeadline(1000, () => fired++, timers)
  d.start()
  timers.advance(999)
  t.equal(fired, 0)
  timers.advance(1000)
  t.equal(fired, 1)
  timers.advance(10_000)
  t.equal(fired, 1, 'once only')
  t.same(timers.armed, [1000])
})

t.test('reads cost no timer work; when the timer finds a later read it waits exactly the rest of the limit after that read', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const d = new IdleDeadline(1000, () => fired++, timers)
  d.start()
  for (let at = 1; at <= 600; at++) {
    timers.advance(at)
    d.read()
  }
  t.same(timers.armed, [1000], '600 reads, still the one timer set at the head')
  timers.advance(1000)
  t.equal(fired, 0, 'the last read was 400 ms ago: not idle')
  t.same(timers.armed, [1000, 600], 're-armed for the 600 ms left after the read at 600')
  timers.advance(1599)
  t.equal(fired, 0)
  timers.advance(1600)
  t.equal(fired, 1, 'fired when the last read was exactly the limit ago')
})

t.test('a stream whose gaps all stay under the limit is never ended', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const d = new IdleDeadline(1000, () => fired++, timers)
  d.start()
  for (let at = 999; at <= 100 * 999; at += 999) {
    timers.advance(at)
    d.read()
  }
  d.clear()
  timers.advance(1_000_000)
  t.equal(fired, 0)
  t.equal(timers.pending(), 0, 'no timer left once cleared')
})

t.test('while the proxy holds the upstream back nothing is idle, and after the resume the upstream has the whole limit', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const d = new IdleDeadline(1000, () => fired++, timers)
  d.start()
  timers.advance(100)
  d.pause()
  timers.advance(60_000)
  t.equal(fired, 0, 'a minute paused is not idleness')
  t.equal(timers.pending(), 0, 'no timer runs while paused')
  d.resume()
  t.same(timers.armed, [1000, 1000], 'armed afresh at the resume')
  timers.advance(60_999)
  t.equal(fired, 0)
  timers.advance(61_000)
  t.equal(fired, 1)
})

t.test('a pause and resume between two firings keeps the one timer and counts from the resume', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const d = new IdleDeadline(1000, () => fired++, timers)
  d.start()
  timers.advance(200)
  d.pause()
  timers.advance(700)
  d.resume()
  t.same(timers.armed, [1000], 'the timer set at the head still runs')
  timers.advance(1000)
  t.same(timers.armed, [1000, 700], 'it found the resume 300 ms ago and waits the rest')
  timers.advance(1700)
  t.equal(fired, 1)
})

t.test('an idle limit of 0 never arms, and clear() stops a running one', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const none = new IdleDeadline(0, () => fired++, timers)
  none.start()
  none.read()
  none.pause()
  none.resume()
  t.same(timers.armed, [], 'no timer for idle_timeout_ms 0')
  const d = new IdleDeadline(1000, () => fired++, timers)
  d.start()
  d.clear()
  d.resume()
  timers.advance(10_000)
  t.equal(fired, 0)
  t.equal(timers.pending(), 0)
})
