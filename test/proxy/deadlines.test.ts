import t from 'tap'
import { Deadline, Deadlines } from '../../src/proxy/deadlines.ts'
import type { DeadlineTimers } from '../../src/proxy/deadlines.ts'

/**
 * Hand-stepped timers: time is an input. `advance(to)` moves the clock and runs every timer due
 * by then, in order; `jump(to)` moves it without running any (a blocked event loop: the timers
 * then run late); `armed` lists each delay the deadlines asked for.
 */
function steppedTimers(): DeadlineTimers & { advance(to: number): void; jump(to: number): void; armed: number[]; pending(): number } {
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
        now = Math.max(now, next[1].due)
        next[1].fn()
      }
      now = to
    },
    jump(to) {
      now = to
    },
    armed,
    pending: () => timers.size,
  }
}

t.test('silence of the full limit after the head ends the exchange once', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const d = new Deadlines({ idle: 1000 }, () => fired++, timers)
  d.start(Deadline.idle)
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
  const d = new Deadlines({ idle: 1000 }, () => fired++, timers)
  d.start(Deadline.idle)
  for (let at = 1; at <= 600; at++) {
    timers.advance(at)
    d.touch(Deadline.idle)
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
  const d = new Deadlines({ idle: 1000 }, () => fired++, timers)
  d.start(Deadline.idle)
  for (let at = 999; at <= 100 * 999; at += 999) {
    timers.advance(at)
    d.touch(Deadline.idle)
  }
  d.clear(Deadline.idle)
  timers.advance(1_000_000)
  t.equal(fired, 0)
  t.equal(timers.pending(), 0, 'no timer left once cleared')
})

t.test('while the proxy holds the upstream back nothing is idle, and after the resume the upstream has the whole limit', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const d = new Deadlines({ idle: 1000 }, () => fired++, timers)
  d.start(Deadline.idle)
  timers.advance(100)
  d.pause(Deadline.idle)
  timers.advance(60_000)
  t.equal(fired, 0, 'a minute paused is not idleness')
  t.equal(timers.pending(), 0, 'no timer runs while paused')
  d.resume(Deadline.idle)
  t.same(timers.armed, [1000, 1000], 'armed afresh at the resume')
  timers.advance(60_999)
  t.equal(fired, 0)
  timers.advance(61_000)
  t.equal(fired, 1)
})

t.test('a pause and resume between two firings keeps the one timer and counts from the resume', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const d = new Deadlines({ idle: 1000 }, () => fired++, timers)
  d.start(Deadline.idle)
  timers.advance(200)
  d.pause(Deadline.idle)
  timers.advance(700)
  d.resume(Deadline.idle)
  t.same(timers.armed, [1000], 'the timer set at the head still runs')
  timers.advance(1000)
  t.same(timers.armed, [1000, 700], 'it found the resume 300 ms ago and waits the rest')
  timers.advance(1700)
  t.equal(fired, 1)
})

t.test('an idle limit of 0 never arms, and clear() stops a running one', async (t) => {
  const timers = steppedTimers()
  let fired = 0
  const none = new Deadlines({ idle: 0 }, () => fired++, timers)
  none.start(Deadline.idle)
  none.touch(Deadline.idle)
  none.pause(Deadline.idle)
  none.resume(Deadline.idle)
  t.same(timers.armed, [], 'no timer for idle_timeout_ms 0')
  const d = new Deadlines({ idle: 1000 }, () => fired++, timers)
  d.start(Deadline.idle)
  d.clear(Deadline.idle)
  d.resume(Deadline.idle)
  timers.advance(10_000)
  t.equal(fired, 0)
  t.equal(timers.pending(), 0)
})

t.test('several deadlines share one timer, set for the earliest due', async (t) => {
  const timers = steppedTimers()
  const expired: Deadline[] = []
  const d = new Deadlines({ headers: 300, total: 5000, idle: 1000 }, (kind) => expired.push(kind), timers)
  d.start(Deadline.total)
  d.start(Deadline.headers)
  t.same(timers.armed, [5000, 300], 're-armed once for the earlier headers deadline')
  t.equal(timers.pending(), 1, 'one timer for both')
  timers.advance(200)
  d.clear(Deadline.headers)
  d.start(Deadline.idle)
  t.same(timers.armed, [5000, 300], 'the idle deadline (due at 1200) waits for the timer set for 300')
  timers.advance(300)
  t.same(timers.armed, [5000, 300, 900], 'at 300 the timer re-arms for the earliest running deadline: idle at 1200')
  timers.advance(1200)
  t.same(expired, [Deadline.idle])
})

t.test('the first deadline to expire ends them all: the callback runs once, with its kind', async (t) => {
  const timers = steppedTimers()
  const expired: Deadline[] = []
  const d = new Deadlines({ body: 100, total: 150 }, (kind) => expired.push(kind), timers)
  d.start(Deadline.total)
  d.start(Deadline.body)
  timers.advance(10_000)
  t.same(expired, [Deadline.body], 'the body deadline was due first; the total one never fires after it')
  d.start(Deadline.idle)
  d.resume(Deadline.body)
  timers.advance(20_000)
  t.same(expired, [Deadline.body])
  t.equal(timers.pending(), 0)
})

t.test('when a late timer finds two deadlines past due, the one due first expires', async (t) => {
  const timers = steppedTimers()
  const expired: Deadline[] = []
  const d = new Deadlines({ headers: 1000, total: 500 }, (kind) => expired.push(kind), timers)
  d.start(Deadline.headers)
  timers.advance(100)
  d.start(Deadline.total)
  timers.jump(2000)
  timers.advance(2000)
  t.same(expired, [Deadline.total], 'total (due at 600) before headers (due at 1000), though headers is checked first')
})

t.test('touching a body deadline keeps it alive without timer work; silence of its limit expires it', async (t) => {
  const timers = steppedTimers()
  const expired: Deadline[] = []
  const d = new Deadlines({ body: 1000 }, (kind) => expired.push(kind), timers)
  d.start(Deadline.body)
  for (let at = 100; at <= 2000; at += 100) {
    timers.advance(at)
    d.touch(Deadline.body)
  }
  t.same(expired, [], 'a body that keeps sending is never cut')
  t.same(timers.armed, [1000, 900, 900], 'a re-arm only when the timer runs (at 1000 and 1900, each finding the touch 100 ms before), none per touch')
  timers.advance(3000)
  t.same(expired, [Deadline.body], 'expired exactly the limit after the last touch')
})

t.test('a deadline is started once: a second start, or a start after clear, changes nothing', async (t) => {
  const timers = steppedTimers()
  const expired: Deadline[] = []
  const d = new Deadlines({ headers: 1000, total: 0 }, (kind) => expired.push(kind), timers)
  d.start(Deadline.total)
  t.same(timers.armed, [], 'a limit of 0 is no deadline')
  d.start(Deadline.headers)
  timers.advance(500)
  d.start(Deadline.headers)
  timers.advance(1000)
  t.same(expired, [Deadline.headers], 'counted from the first start')
  const e = new Deadlines({ headers: 1000 }, (kind) => expired.push(kind), timers)
  e.clear(Deadline.headers)
  e.start(Deadline.headers)
  timers.advance(5000)
  t.same(expired, [Deadline.headers], 'cleared before it started: never runs')
  const f = new Deadlines({ headers: 1000, idle: 1000 }, (kind) => expired.push(kind), timers)
  f.start(Deadline.headers)
  f.clearAll()
  t.equal(timers.pending(), 0, 'clearAll lets the timer go at once')
})
