import { spawnSync } from 'node:child_process'
import { pathToFileURL } from 'node:url'
import { isDeepStrictEqual } from 'node:util'
import t from 'tap'
import { MAX_DEPTH, MAX_OBJECT_KEYS, SteppedJson, wholeCost } from '../../src/realtime/stepped-json.ts'
import { createRng } from '../../src/sim/rng.ts'
import { distPath } from '../helpers/paths.ts'

/** Parses `text` in steps of `room` bytes; the largest step's bytes beside the result. */
function stepped(text: Buffer, room: number): { value: unknown; failed: boolean; steps: number; largest: number } {
  const json = new SteppedJson(text)
  let steps = 0
  let largest = 0
  for (;;) {
    const done = json.step(room)
    steps++
    largest = Math.max(largest, json.used)
    if (done) return { value: json.value, failed: json.failed, steps, largest }
    if (steps > text.length + 2) throw new Error('no progress')
  }
}

/** JSON.parse's verdict on the same bytes, as the session read them before. */
function reference(text: Buffer): { value: unknown; failed: boolean } {
  try {
    return { value: JSON.parse(text.toString('utf8')), failed: false }
  } catch {
    return { value: undefined, failed: true }
  }
}

/** Same values, prototypes, -0s and key order. */
function same(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(a, b) && JSON.stringify(a) === JSON.stringify(b)
}

const CHARS = ['a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\t', '\u0001', '\u007f', 'é', 'ß', '€', '中', '😀', '\u2028', '\ud800', '\udc00']

/** Random JSON text: strings with every kind of character (raw or escaped), numbers in every form, nesting, odd keys, whitespace. */
function generate(rnd: () => number, depth: number, long: boolean): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]
  const ws = (): string => (rnd() < 0.7 ? '' : pick([' ', '\n', '\t', '\r', '  \n ']))
  const str = (n: number): string => {
    let s = '"'
    for (let i = 0; i < n; i++) {
      const c = pick(CHARS)
      const code = c.charCodeAt(0)
      if (c === '"' || c === '\\' || code < 0x20 || rnd() < 0.1)
        s +=
          rnd() < 0.5 && c.length === 1
            ? `\\u${code
                .toString(16)
                .padStart(4, rnd() < 0.5 ? '0' : '0')
                .toUpperCase()}`
            : JSON.stringify(c).slice(1, -1)
      else if (code >= 0xd800 && code < 0xe000) s += `\\u${code.toString(16)}`
      else s += c
    }
    return `${s}"`
  }
  const r = rnd()
  if (depth <= 0 || r < 0.35) {
    const k = rnd()
    if (k < 0.4) return str(long && rnd() < 0.3 ? 500 + Math.floor(rnd() * 3000) : Math.floor(rnd() * 12))
    if (k < 0.7) return pick(['0', '-0', '12', '-3.25', '1e5', '2E-3', '6.02e+23', '1e400', '-1.5E-400', '123456789012345678901234567890', '0.1'])
    return pick(['true', 'false', 'null'])
  }
  if (r < 0.65) {
    const n = Math.floor(rnd() * 6)
    return `[${ws()}${Array.from({ length: n }, () => ws() + generate(rnd, depth - 1, long) + ws()).join(',')}${ws()}]`
  }
  const n = Math.floor(rnd() * 6)
  const keys = ['type', 'a', '__proto__', '1', '0', 'constructor', 'toString', 'é', 'a']
  return `{${ws()}${Array.from({ length: n }, () => `${ws()}${rnd() < 0.7 ? JSON.stringify(pick(keys)) : str(4)}${ws()}:${ws()}${generate(rnd, depth - 1, long)}${ws()}`).join(',')}${ws()}}`
}

t.test('parsed in steps, a JSON text gives exactly JSON.parse’s value: every character, escape, number form, nesting and key', async (t) => {
  const rnd = createRng(36)
  let compared = 0
  for (let n = 0; n < 400; n++) {
    const text = Buffer.from(`${generate(rnd, 5, n % 2 === 0)}`)
    const want = reference(text)
    t.notOk(want.failed, 'the generator writes JSON')
    for (const room of [0, 1500, 4096, Number.POSITIVE_INFINITY]) {
      const got = stepped(text, room)
      if (!same(got.value, want.value) || got.failed) t.fail(`differs at room ${room}: ${text.toString().slice(0, 200)}`)
      compared++
    }
  }
  t.equal(compared, 1600)
})

t.test('a text JSON.parse refuses is refused too, and one it reads after changed bytes reads the same, at any step size', async (t) => {
  const rnd = createRng(7)
  let refused = 0
  let read = 0
  const bytes = [0x22, 0x5c, 0x7b, 0x7d, 0x5b, 0x5d, 0x2c, 0x3a, 0x30, 0x2d, 0x2e, 0x65, 0x75, 0x01, 0x20, 0x0a, 0x80, 0xc3, 0xe2, 0xf0, 0xff, 0x74, 0x6e]
  for (let n = 0; n < 1500; n++) {
    const text = Buffer.from(generate(rnd, 4, n % 3 === 0))
    const edits = 1 + Math.floor(rnd() * 3)
    let changed = text
    for (let e = 0; e < edits; e++) {
      const at = Math.floor(rnd() * changed.length)
      const kind = rnd()
      const b = bytes[Math.floor(rnd() * bytes.length)]
      if (kind < 0.4) changed[at] = b
      else if (kind < 0.7) changed = Buffer.concat([changed.subarray(0, at), Buffer.from([b]), changed.subarray(at)])
      else changed = Buffer.concat([changed.subarray(0, at), changed.subarray(at + 1)])
    }
    const want = reference(changed)
    for (const room of [0, 2000, Number.POSITIVE_INFINITY]) {
      const got = stepped(changed, room)
      if (got.failed !== want.failed || !same(got.value, want.value)) t.fail(`differs at room ${room}: ${JSON.stringify(changed.toString('latin1').slice(0, 300))}`)
    }
    if (want.failed) refused++
    else read++
  }
  t.ok(refused > 300 && read > 100, `both kinds were tried (${refused} refused, ${read} read)`)
})

t.test('a string of malformed UTF-8 cut into pieces decodes to the same replacement characters as the whole', async (t) => {
  const rnd = createRng(11)
  const tails = [0x80, 0xbf, 0xc2, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80, 0xed, 0xa0, 0xc0, 0xff, 0x41, 0x5c]
  for (let n = 0; n < 200; n++) {
    const body: number[] = []
    for (let i = 0; i < 5000; i++) {
      const b = tails[Math.floor(rnd() * tails.length)]
      if (b === 0x5c) body.push(0x5c, 0x6e)
      else body.push(b)
    }
    const text = Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, ...body, 0x22, 0x7d])
    const want = reference(text)
    for (const room of [0, 1024, 3000]) {
      const got = stepped(text, room)
      if (got.failed !== want.failed || !same(got.value, want.value)) t.fail(`differs at room ${room}, text ${n}`)
    }
  }
  t.pass('200 texts of 5,000 malformed bytes, three step sizes')
  // No byte that starts a character for longer than a step (each is a U+FFFD of its own): cut inside the run.
  const run = Buffer.concat([Buffer.from('{"a":"'), Buffer.alloc(3000, 0x80), Buffer.from('é"}')])
  // The first step ends after the key (its KEY_COST), the string goes in three.
  t.same(stepped(run, 1024), { ...reference(run), steps: 4, largest: 1024 })
  t.equal((reference(run).value as { a: string }).a.length, 3001)
  for (const lead of [[0xf0, 0x9f, 0x98], [0xe2, 0x82], [0xc3], [0xf0, 0x9f]]) {
    // A sequence (complete or not) across the step's end, then stray bytes.
    for (let at = 1015; at < 1025; at++) {
      const text = Buffer.concat([Buffer.from('{"a":"'), Buffer.alloc(at - 6, 0x41), Buffer.from(lead), Buffer.alloc(50, 0x80), Buffer.from('"}')])
      if (!same(stepped(text, 1024).value, reference(text).value)) t.fail(`differs: lead ${lead} at ${at}`)
    }
  }
})

t.test('a step goes through about the room it is given: a 1 MiB audio event in 128 KiB steps, its string in pieces', async (t) => {
  const audio = Buffer.alloc(768 * 1024, 7).toString('base64')
  const text = Buffer.from(JSON.stringify({ type: 'input_audio_buffer.append', event_id: 'e1', audio }))
  const got = stepped(text, 128 * 1024)
  t.equal(got.steps, Math.ceil(text.length / (128 * 1024)))
  t.equal(got.largest, 128 * 1024)
  t.same(got.value, { type: 'input_audio_buffer.append', event_id: 'e1', audio })
  // No room still goes through MIN_STEP's worth: these 13 bytes' tokens, the brace and the key
  // (128 each, the key KEY_COST more) in the first step, seven in the second, the last brace in a third.
  const tiny = stepped(Buffer.from('{"a":[1,2,3]}'), 0)
  t.same(tiny, { value: { a: [1, 2, 3] }, failed: false, steps: 3, largest: 9 })
})

t.test('a string made of escapes is cut into steps of the room like any other, and a quote inside an escape does not end it', async (t) => {
  const value = `${'\n'.repeat(300_000)}"${'\u00e9'.repeat(100_000)}`
  const text = Buffer.from(JSON.stringify({ text: value }))
  const got = stepped(text, 128 * 1024)
  t.same(got.value, { text: value })
  t.ok(got.steps >= Math.floor(text.length / (128 * 1024)), `${got.steps} steps for ${text.length} bytes`)
  t.ok(got.largest <= 128 * 1024 + 6, `the largest step went through ${got.largest} bytes`)
})

t.test('a text of tiny tokens costs each token beyond its bytes: deep nesting and many keys go in many steps, each within its room', async (t) => {
  const room = 128 * 1024
  const object = (n: number, from: number): string => `{${Array.from({ length: n }, (_, i) => `"k${from + i}":${i}`).join(',')}}`
  for (const text of ['['.repeat(1_000) + ']'.repeat(1_000), `[${Array.from({ length: 5 }, (_, i) => object(4_000, i * 4_000)).join(',')}]`]) {
    const json = new SteppedJson(Buffer.from(text))
    let steps = 0
    let spent = 0
    let over = 0
    while (!json.step(room)) {
      steps++
      spent += json.spent
      // A step stops before the token that would pass its room: it passes it by one key at most.
      if (json.spent > room + 128 + 1024 + '"k19999"'.length) over++
    }
    t.equal(over, 0, 'no step spends more than its room and one key (its token, its cost and its bytes)')
    t.ok(json.spent >= json.used && spent > 4 * text.length, `${steps + 1} steps spent ${spent} for ${text.length} bytes`)
    t.ok(isDeepStrictEqual(json.value, JSON.parse(text)), 'the same value as JSON.parse')
  }
})

t.test('a key costs 1,024 beyond its tokens and an escape 16 beyond its bytes: 4,096 keys and 32,768 escapes go in many steps', async (t) => {
  const room = 128 * 1024
  // Each key with fresh names costs V8 about 2 µs (string table, dictionary), each `\\n` about 30 ns: at
  // their bytes and tokens alone these took 17 steps of up to 1.2 ms and one step of 1–2 ms.
  const keys = Buffer.from(`{"type":"session.update","pad":{${Array.from({ length: 4096 }, (_, i) => `"k${i}":${i}`).join(',')}}}`)
  const escapes = Buffer.from(`{"text":"${'\\n'.repeat(32_768)}"}`)
  const unicode = Buffer.from(`{"text":"${'\\u00e9'.repeat(10_000)}"}`)
  for (const [text, steps] of [
    [keys, 49],
    [escapes, 5],
    [unicode, 2],
  ] as const) {
    const got = stepped(text, room)
    t.has(got, { ...reference(text), steps }, `${text.length} bytes in ${steps} steps`)
  }
})

t.test('what a whole JSON.parse costs: the bytes, 64 a separator or backslash and 128 more a colon, undefined past the limit; the text decoded as JSON.parse reads it', async (t) => {
  const limit = 128 * 1024
  const SEPARATOR = 64
  const COLON = 128
  const audio = Buffer.from(JSON.stringify({ type: 'input_audio_buffer.append', audio: 'QUJD+/=='.repeat(800) }))
  t.same(wholeCost(audio, limit), { text: audio.toString('utf8'), cost: audio.length + 2 * SEPARATOR + 2 * COLON }, 'an audio event: its bytes, its brace, its comma and its two keys')
  const delta = Buffer.from('{"type":"response.output_text.delta","delta":"a, [b] {c}"}')
  t.equal(wholeCost(delta, limit)?.cost, delta.length + 5 * SEPARATOR + 2 * COLON, 'separators inside strings count too: a bound')
  const invalid = Buffer.from([0x7b, 0x22, 0xff, 0xe2, 0x82, 0x22, 0x3a, 0x31, 0x7d])
  t.equal(wholeCost(invalid, limit)?.text, invalid.toString('utf8'), 'malformed UTF-8 decoded as the session decodes it for JSON.parse')
  const nested = Buffer.from(`${'['.repeat(2047)}${']'.repeat(2047)}`)
  t.equal(wholeCost(nested, limit), undefined, '2,047 nested arrays cost more than 128 KiB')
  t.equal(wholeCost(nested, 4094 + 2047 * SEPARATOR)?.cost, 4094 + 2047 * SEPARATOR, 'exactly at the limit is whole')
  t.equal(wholeCost(Buffer.alloc(limit + 1, 0x20), limit), undefined, 'more bytes than the limit, undecoded')
  const keys = Buffer.from(`{${Array.from({ length: 2000 }, (_, i) => `"k${i}":${i}`).join(',')}}`)
  t.equal(wholeCost(keys, limit), undefined, '2,000 keys in 25 KB cost more than 128 KiB')
  t.equal(wholeCost(keys.subarray(0, 1000), limit)?.cost, 1000 + 111 * SEPARATOR + 111 * COLON, 'what a text holds, parsed or not, is what counts')
  const most = Math.floor((limit - 1) / (SEPARATOR + COLON))
  const admitted = (n: number): boolean => {
    const text = Buffer.from(`{${Array.from({ length: n }, (_, i) => `"${i.toString(36).padStart(3, '0')}":0`).join(',')}}`)
    return wholeCost(text, limit) !== undefined
  }
  t.ok(admitted(600) && !admitted(most), `an object of 600 keys is read whole, not one of ${most} (fresh names cost JSON.parse about 0.6 µs each)`)
  const escapes = Buffer.from(`{"a":"${'\\n'.repeat(1000)}"}`)
  t.equal(wholeCost(escapes, limit)?.cost, escapes.length + 1001 * SEPARATOR + COLON, 'a backslash costs as a separator')
  t.equal(wholeCost(Buffer.from(`{"a":"${'\\n'.repeat(2048)}"}`), limit), undefined, '2,048 escapes cost more than 128 KiB')
})

t.test('a key named __proto__ is an own property, as JSON.parse defines it, never the object’s prototype', async (t) => {
  const got = stepped(Buffer.from('{"__proto__":{"polluted":true},"b":1,"b":2}'), 0)
  const value = got.value as Record<string, unknown>
  t.equal(Object.getPrototypeOf(value), Object.prototype)
  t.same(Object.keys(value), ['__proto__', 'b'])
  t.equal(value.b, 2)
  t.equal(({} as Record<string, unknown>).polluted, undefined)
})

t.test('whitespace, truncation and trailing bytes: refused where JSON.parse refuses', async (t) => {
  for (const [text, ok] of [
    [' {"a":1} \n', true],
    ['{"a":1} x', false],
    ['{"a":1', false],
    ['{"a":"x', false],
    ['{"a":tru}', false],
    ['{"a":01}', false],
    ['{"a":1.}', false],
    ['{"a":-}', false],
    ['{"a":1e}', false],
    ['{"a" 1}', false],
    ['{"a":1,}', false],
    ['[1,]', false],
    ['{"a":"\\x"}', false],
    ['{"a":"\\u12G4"}', false],
    ['\ufeff{}', false],
    ['', false],
    ['"s"', true],
    ['[]', true],
  ] as const) {
    const got = stepped(Buffer.from(`${text}${' '.repeat(text.length % 2 === 0 ? 3000 : 0)}`), 0)
    t.equal(got.failed, !ok, JSON.stringify(text))
    t.equal(got.failed, reference(Buffer.from(text)).failed, `as JSON.parse: ${JSON.stringify(text)}`)
  }
})

t.test('an object of MAX_OBJECT_KEYS keys parses as JSON.parse parses it; one key more refuses the text, as soon as that key starts', async (t) => {
  t.equal(MAX_OBJECT_KEYS, 4096)
  const members = (n: number): string => Array.from({ length: n }, (_, i) => `"k${i}":${i}`).join(',')
  const atLimit = Buffer.from(`{"type":"session.update","pad":{${members(MAX_OBJECT_KEYS)}}}`)
  for (const room of [0, 16 * 1024, 128 * 1024]) {
    const got = stepped(atLimit, room)
    t.notOk(got.failed, `at the limit, in steps of ${room}`)
    t.ok(same(got.value, JSON.parse(atLimit.toString('utf8'))), 'the same value as JSON.parse')
  }
  const over = `{"type":"session.update","pad":{${members(MAX_OBJECT_KEYS + 1)}}}`
  t.notOk(reference(Buffer.from(over)).failed, 'JSON.parse reads it')
  for (const room of [0, 16 * 1024, 128 * 1024]) {
    const got = stepped(Buffer.from(over), room)
    t.ok(got.failed, `one key over the limit is refused, in steps of ${room}`)
    t.equal(got.value, undefined)
  }
  const json = new SteppedJson(Buffer.from(over))
  let read = 0
  while (!json.step(1024)) read += json.used
  t.ok(read + json.used < over.length - 4, 'refused at the key over the limit, the rest unread')
  const siblings = `{"type":"session.update","a":{${members(MAX_OBJECT_KEYS)}},"b":[{${members(MAX_OBJECT_KEYS)}},{"c":{${members(MAX_OBJECT_KEYS - 3)}}}]}`
  const got = stepped(Buffer.from(siblings), 64 * 1024)
  t.notOk(got.failed, 'objects each within the limit, nested and side by side, read however many keys they hold together')
  t.ok(same(got.value, JSON.parse(siblings)), 'the same value as JSON.parse')
  const duplicates = `{${Array.from({ length: MAX_OBJECT_KEYS + 1 }, () => '"a":1').join(',')}}`
  t.ok(stepped(Buffer.from(duplicates), 0).failed, 'keys count as written: a key repeated past the limit is refused too')
})

t.test('the parser stays compiled across a full GC with no text being parsed (V8 keeps its instances’ map)', async (t) => {
  // A session parses texts of keys in steps, then is let go, then a full GC, four times. Before, each
  // GC threw away the optimized parser ("weak objects": its instances' map died with the last
  // instance) and the next texts ran unoptimized, 3–10× slower, until compiled again.
  const script = `
    import { RealtimeSession } from ${JSON.stringify(pathToFileURL(distPath('src/realtime/session.js')).href)}
    import { Opcode, encodeFrame } from ${JSON.stringify(pathToFileURL(distPath('src/realtime/frame.js')).href)}
    const keys = Array.from({ length: 3000 }, (_, i) => '"k' + i + '":' + i).join(',')
    const frame = encodeFrame(Opcode.text, Buffer.from('{"type":"session.update","pad":{' + keys + '}}'), true)
    const deps = { encodings: { counterFor: () => () => 1 }, maxMessageBytes: 1 << 20, sessions: new Set(), recordResponse() {}, recordSession() {}, onRecordError() {} }
    const route = { label: '/rt', prefix: '/rt', provider: 'openai', inFlight: 0 }
    for (let run = 0; run < 4; run++) {
      const s = new RealtimeSession(deps, route, 'id', '/v1/realtime', new URLSearchParams(), 0)
      s.opened(undefined)
      for (let m = 0; m < 4; m++) {
        s.data('client', frame, m)
        while (s.held > 0) await new Promise((resolve) => setImmediate(resolve))
      }
      s.finish(10)
      console.log('=== full GC')
      globalThis.gc()
    }
  `
  // Compiled on the main thread (--no-concurrent-recompilation), so that the parser is optimized
  // before the first GC on every run: a concurrent compile finished after it about one run in two
  // on Node 26, and then there was no optimized code whose fate the GCs could show.
  const flags = ['--expose-gc', '--trace-opt', '--trace-deopt', '--no-concurrent-recompilation']
  const run = spawnSync(process.execPath, [...flags, '--input-type=module', '-e', script], { encoding: 'utf8' })
  t.equal(run.status, 0, run.stderr)
  const [before, ...after] = run.stdout.split('=== full GC')
  const parser = /<SharedFunctionInfo (step|#token|#string|#next|#number|#take|#open|#startKey|#startValue|#emit|#close|#push)>/
  // "completed compiling … (target TURBOFAN)" on Node 20 and 22, "(target TURBOFAN_JS)" on 26.
  t.match(before, /completed (compiling|optimizing) .*<JSFunction step .*target TURBOFAN/, 'compiled before the first GC')
  // "reason: weak objects" up to Node 22, "reason: embedded weak objects cleared" on Node 26.
  const thrown = after
    .join('')
    .split('\n')
    .filter((line) => /reason: (embedded )?weak objects/.test(line) && parser.test(line))
  t.same(thrown, [], 'no optimized parser code thrown away at a GC')
})

t.test('a text nesting MAX_DEPTH arrays and objects parses as JSON.parse parses it; one level deeper refuses the text, as soon as that level opens', async (t) => {
  t.equal(MAX_DEPTH, 2048)
  const arrays = (depth: number): Buffer => Buffer.from(`${'['.repeat(depth)}${']'.repeat(depth)}`)
  const objects = (depth: number): Buffer => Buffer.from(`${'{"a":'.repeat(depth - 1)}[0]${'}'.repeat(depth - 1)}`)
  for (const make of [arrays, objects]) {
    for (const room of [0, 4096, 128 * 1024]) {
      const deepest = make(MAX_DEPTH)
      const got = stepped(deepest, room)
      t.ok(!got.failed && same(got.value, reference(deepest).value), `${MAX_DEPTH} deep, in steps of ${room}`)
      const over = make(MAX_DEPTH + 1)
      const json = new SteppedJson(over)
      let used = 0
      while (!json.step(room)) used += json.used
      t.ok(json.failed && json.value === undefined, `${MAX_DEPTH + 1} deep is refused, in steps of ${room}`)
      // Refused at the opening of the level over the limit: the rest is never read.
      let opened = 0
      let next = 0
      while (opened <= MAX_DEPTH) if (over[next++] === 0x5b || over[next - 1] === 0x7b) opened++
      t.equal(used + json.used, next - 1, 'read no further than that level')
    }
  }
  // Side by side, each within the limit: depth is what counts, not how many containers.
  const wide = Buffer.from(`[${Array.from({ length: 3 }, () => arrays(MAX_DEPTH - 1).toString()).join(',')}]`)
  t.ok(same(stepped(wide, 128 * 1024).value, JSON.parse(wide.toString())), 'three side by side, each within the limit')
})
