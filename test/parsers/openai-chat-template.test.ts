import t from 'tap'
import type { Test } from 'tap'
import fc from 'fast-check'
import { EventTemplate, shapeOf } from '../../src/parsers/json-template.ts'
import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { chatContext as ctx, Counting, FullParseOnly, run } from '../helpers/chat-fast-path.ts'

// The template fast path (OpenAIChatParser.scan + json-template.ts) reads chunks that repeat the
// text of earlier plain chunks without JSON.parse. It must give exactly what the full parse gives:
// the same content events from the same reads, the same summary, the same failure on bad JSON.

const sse = (datas: readonly string[]): Buffer => Buffer.from(datas.map((d) => `data: ${d}\n\n`).join(''))
/** One read per event, so a difference shows which event it came from. */
const perEvent = (datas: readonly string[]): Buffer[] => datas.map((d) => Buffer.from(`data: ${d}\n\n`))

/** What the simulator sends: a send timestamp in every chunk. */
const sim = (text: string, ms: string): string =>
  `{"id":"chatcmpl-sim1","object":"chat.completion.chunk","created":1796029992,"model":"m","tokentap_sent_ms":${ms},"choices":[{"index":0,"delta":{"content":${text}},"logprobs":null,"finish_reason":null}]}`
/** What OpenAI sends: `usage: null` and a random `obfuscation` padding at the end of every chunk. */
const openai = (text: string, pad: string): string =>
  `{"id":"chatcmpl-Dx0Xq","object":"chat.completion.chunk","created":1782955818,"model":"gpt-4o-mini","service_tier":"default","system_fingerprint":"fp_d0469e1700","choices":[{"index":0,"delta":{"content":${text}},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"${pad}"}`
const FIRST_SIM = sim('""', '1796029992478.064').replace('"delta":{"content"', '"delta":{"role":"assistant","content"')
const FIRST_OPENAI = openai('""', 'HM7mrUsjk').replace('"delta":{"content"', '"delta":{"role":"assistant","content"')

const simStream = (texts: readonly string[]): string[] => [FIRST_SIM, ...texts.map((x, i) => sim(x, `1796029992${String(500 + i)}.${i % 7}`))]
const openaiStream = (texts: readonly string[]): string[] => [FIRST_OPENAI, ...texts.map((x, i) => openai(x, 'aB3xY9zQ'.slice(0, 1 + (i % 8))))]

/** Full parse and fast path agree, one read per event and all in one read. */
function agree(t: Test, datas: readonly string[], what: string): Counting {
  const fast = new Counting(ctx())
  t.same(run(fast, perEvent(datas)), run(new FullParseOnly(ctx()), perEvent(datas)), `${what}: one read per event`)
  t.same(run(new OpenAIChatParser(ctx()), [sse(datas)]), run(new FullParseOnly(ctx()), [sse(datas)]), `${what}: one read`)
  return fast
}

const WORDS = ['" the"', '" cat"', '" sat"', '" on"', '" a"', '" mat"', '"."', '" And"', '" then"', '" it"', '" slept"']

t.test('simulator chunks that differ in text and timestamp are read by the template after two full parses', async (t) => {
  const p = agree(t, simStream(WORDS), 'sim')
  t.equal(p.matched, WORDS.length - 1, 'all but the role chunk and the first text chunk')
})

t.test('OpenAI chunks with a varying obfuscation padding are read by the template', async (t) => {
  const p = agree(t, openaiStream(WORDS), 'openai')
  t.equal(p.matched, WORDS.length - 1)
})

const TEXTS: [string, string][] = [
  ['escaped quotes in the text', '"say \\"hi\\""'],
  ['a backslash at the end of the text', '"a\\\\"'],
  ['newlines and tabs escaped', '"line\\nnext\\tcol"'],
  ['unicode escapes and raw non-ASCII text', '"\\u00e9t\\u00e9 — 日本 🎉"'],
  ['a surrogate pair escaped', '"\\ud83c\\udf89"'],
  ['an empty text', '""'],
  ['text that looks like JSON', '"{\\"usage\\":{\\"completion_tokens\\":5}}"'],
  ['text that names other fields', '"\\"refusal\\":\\"x\\",\\"delta\\":{"'],
  ['a long text', `"${'lorem ipsum '.repeat(200)}"`],
]

for (const [what, text] of TEXTS) {
  t.test(`the template agrees with the full parse on ${what}`, async (t) => {
    const p = agree(t, simStream([...WORDS.slice(0, 4), text, ...WORDS.slice(4)]), what)
    t.ok(p.matched >= WORDS.length - 1, `the template read ${p.matched} chunks`)
    agree(t, openaiStream([...WORDS.slice(0, 4), text, ...WORDS.slice(4)]), `${what} (OpenAI)`)
  })
}

/** Chunks the template must not read as a plain text chunk, or that must fail like JSON.parse. */
const ODD: [string, string][] = [
  ['a raw control character in the text', sim('"a\u0001b"', '1796029992999.5')],
  ['a raw newline in the text', sim('"a\nb"', '1796029992999.5')],
  ['a bad escape in the text', sim('"a\\qb"', '1796029992999.5')],
  ['a short unicode escape', sim('"a\\u12"', '1796029992999.5')],
  ['an unterminated text', sim('"abc', '1796029992999.5')],
  ['a timestamp that is no JSON number (leading zero)', sim('" x"', '01796029992999.5')],
  ['a timestamp that is no JSON number (trailing dot)', sim('" x"', '1796029992999.')],
  ['a timestamp that is a bare minus', sim('" x"', '-')],
  ['a timestamp with an exponent', sim('" x"', '1.7e12')],
  ['a negative timestamp', sim('" x"', '-5')],
  ['a timestamp that became a string', sim('" x"', '"1796029992999.5"')],
  ['a timestamp that became null', sim('" x"', 'null')],
  ['a cut-off chunk', sim('" x"', '1796029992999.5').slice(0, -5)],
  ['a chunk with its end missing', sim('" x"', '1796029992999.5').slice(0, -1)],
  ['two chunks spliced together', sim('" x"', '1796029992999.5').slice(0, 120) + sim('" y"', '1796029992999.6').slice(60)],
  ['a chunk spliced into the text', sim('" x', '1796029992999.5') + sim('" y"', '1796029992999.6')],
  ['trailing garbage', `${sim('" x"', '1796029992999.5')}]`],
  ['trailing whitespace', `${sim('" x"', '1796029992999.5')} `],
  ['usage on the chunk', `${sim('" x"', '1796029992999.5').slice(0, -1)},"usage":{"completion_tokens":3}}`],
  ['a refusal beside the content', sim('" x","refusal":"no"', '1796029992999.5')],
  ['a second choice', sim('" x"', '1796029992999.5').replace('}]}', '},{"index":1,"delta":{"content":"y"}}]}')],
  ['the content key repeated', sim('" x","content":"other"', '1796029992999.5')],
  ['the model changed', sim('" x"', '1796029992999.5').replace('"model":"m"', '"model":"n"')],
  ['an error object', `${sim('" x"', '1796029992999.5').slice(0, -1)},"error":{"code":"boom"}}`],
  ['a content array', sim('[{"type":"text","text":"hi"}]', '1796029992999.5')],
  ['content null', sim('null', '1796029992999.5')],
]

for (const [what, chunk] of ODD) {
  t.test(`after the template is learned, ${what} gets exactly the full parse's result`, async (t) => {
    const datas = [...simStream(WORDS.slice(0, 5)), chunk, ...simStream(WORDS.slice(5)).slice(1)]
    agree(t, datas, what)
  })
}

t.test('an obfuscation padding with an escape or a quote is not read by the template but agrees', async (t) => {
  const datas = [...openaiStream(WORDS.slice(0, 5)), openai('" x"', 'a\\"b'), openai('" y"', 'a\\\\b'), openai('" z"', 'a\\u0041'), openai('" w"', 'ab"c')]
  agree(t, datas, 'padding')
})

/** Legacy Completions: the text is `choices[0].text`. */
const legacy = (text: string, tail = ''): string =>
  `{"id":"cmpl-D8ZF","object":"text_completion","created":1770934485,"choices":[{"text":${text},"index":0,"logprobs":null,"finish_reason":null${tail}}],"model":"gpt-3.5-turbo-instruct","usage":null}`

t.test('legacy Completions chunks are read by the template too, and agree with the full parse', async (t) => {
  const p = agree(
    t,
    WORDS.map((w) => legacy(w)),
    'legacy',
  )
  t.equal(p.matched, WORDS.length - 1, 'all but the first chunk')
  const odd = [
    legacy('"a"', ',"delta":{"content":"b"}'),
    legacy('null'),
    legacy('["x"]'),
    legacy('"say \\"hi\\""'),
    legacy('"a\u0001"'),
    legacy('" x"').replace('"usage":null', '"usage":{"completion_tokens":9}'),
  ]
  for (const [i, chunk] of odd.entries()) agree(t, [...WORDS.slice(0, 4).map((w) => legacy(w)), chunk, ...WORDS.slice(4).map((w) => legacy(w))], `legacy odd chunk ${i}`)
  agree(t, [legacy('" a"'), sim('" b"', '1.5'), legacy('" c"'), sim('" d"', '2.5'), sim('" e"', '3.5')], 'legacy and chat chunks mixed')
})

t.test('chunks whose text never repeats (logprobs of varying length) agree with the full parse', async (t) => {
  const withLogprobs = (w: string, i: number): string =>
    `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":${w}},"logprobs":{"content":[${Array.from({ length: 1 + (i % 4) }, (_, j) => `{"token":"t${j}","logprob":-0.${j + 1},"bytes":[${Array.from({ length: 1 + ((i + j) % 3) }, () => 32).join(',')}]}`).join(',')}]},"finish_reason":null}]}`
  const datas = Array.from({ length: 600 }, (_, i) => withLogprobs(WORDS[i % WORDS.length], i))
  const p = agree(t, datas, 'logprobs')
  t.ok(p.matched < datas.length, `the template read ${p.matched} of ${datas.length}`)
})

t.test('a chunk in a named SSE event never takes the template', async (t) => {
  const datas = simStream(WORDS)
  const bytes = Buffer.from(datas.map((d, i) => `${i === 6 ? 'event: error\n' : ''}data: ${d}\n\n`).join(''))
  const fast = run(new OpenAIChatParser(ctx()), [bytes])
  t.same(fast, run(new FullParseOnly(ctx()), [bytes]))
  t.ok(fast.summary.error !== undefined, 'the error is seen')
})

t.test('randomly mutated chunks after a learned template get exactly the full parse result', async (t) => {
  const base = simStream(WORDS)
  const alphabet = ['"', '\\', '{', '}', '[', ']', ',', ':', '0', '1', '.', '-', 'e', 'a', ' ', '\n', '\u0001', 'u']
  const mutation = fc.record({
    event: fc.integer({ min: 3, max: base.length - 1 }),
    at: fc.nat(),
    op: fc.constantFrom('insert', 'delete', 'replace'),
    ch: fc.constantFrom(...alphabet),
  })
  fc.assert(
    fc.property(fc.array(mutation, { minLength: 1, maxLength: 3 }), (ms) => {
      const datas = [...base]
      for (const m of ms) {
        const d = datas[m.event]
        const at = m.at % (d.length + 1)
        datas[m.event] = m.op === 'insert' ? d.slice(0, at) + m.ch + d.slice(at) : m.op === 'delete' ? d.slice(0, at) + d.slice(at + 1) : d.slice(0, at) + m.ch + d.slice(at + 1)
      }
      const fast = run(new OpenAIChatParser(ctx()), perEvent(datas))
      const full = run(new FullParseOnly(ctx()), perEvent(datas))
      return JSON.stringify(fast) === JSON.stringify(full)
    }),
    { numRuns: 3000, seed: 7 },
  )
  t.pass('3000 mutated streams agree')
})

t.test('a template makes holes of every member scalar but the fields the parser reads', async (t) => {
  const fixed = (key: string): boolean => key === 'model' || key === 'content'
  const path = ['choices', 0, 'delta', 'content'] as const
  const a = shapeOf('{"id":"x","n":1,"model":"m","choices":[{"delta":{"content":"a"}}],"list":[1,"s"],"pad":"q","esc":"\\n"}', path, fixed)
  if (a === undefined) throw new Error('no shape')
  t.equal(a.vals.length, 4, 'id, n, content and pad are holes; model, array elements and an escaped string are not')
  const tpl = new EventTemplate(a)
  t.equal(tpl.holes, 4)
  t.equal(tpl.match('{"id":"y","n":-3.5e+2,"model":"m","choices":[{"delta":{"content":"\\u0041\\n"}}],"list":[1,"s"],"pad":"anything here","esc":"\\n"}'), 'A\n')
  t.equal(tpl.match('{"id":"x","n":1,"model":"M","choices":[{"delta":{"content":"a"}}],"list":[1,"s"],"pad":"q","esc":"\\n"}'), undefined, 'model is fixed')
  t.equal(tpl.match('{"id":"x","n":1,"model":"m","choices":[{"delta":{"content":"a"}}],"list":[2,"s"],"pad":"q","esc":"\\n"}'), undefined, 'array elements are fixed')
  t.equal(tpl.match('{"id":"x","n":01,"model":"m","choices":[{"delta":{"content":"a"}}],"list":[1,"s"],"pad":"q","esc":"\\n"}'), undefined, 'a number hole takes only JSON numbers')
  t.equal(tpl.match('{"id":"x\\"","n":1,"model":"m","choices":[{"delta":{"content":"a"}}],"list":[1,"s"],"pad":"q","esc":"\\n"}'), undefined, 'a string hole takes no escapes')
  t.equal(tpl.match('{"id":"x","n":1,"model":"m","choices":[{"delta":{"content":"a\\x"}}],"list":[1,"s"],"pad":"q","esc":"\\n"}'), undefined, 'a bad escape in the content fails')
  t.equal(
    new EventTemplate(a).match('{"id":"x","n":1,"model":"m","choices":[{"delta":{"content":"b"}}],"list":[1,"s"],"pad":"q","esc":"\\n"}'),
    'b',
    'a second template of the same shape (compiled once) matches too',
  )
  t.equal(shapeOf('{"choices":[{"delta":{"content":"a","content":"b"}}]}', path, fixed), undefined, 'a repeated key gives no shape')
  t.equal(shapeOf('{"choices":[{"delta":{"text":"a"}}]}', path, fixed), undefined, 'no content string gives no shape')
})

/** The simulator's last chunk: no content, a finish reason. */
const simFinish = (ms: string, model = 'm'): string =>
  `{"id":"chatcmpl-sim1","object":"chat.completion.chunk","created":1796029992,"model":"${model}","tokentap_sent_ms":${ms},"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`

t.test('a stream of a shape another stream learned reads every chunk by template, its model included', async (t) => {
  // A model no other test uses: these shapes are new to the process.
  const withModel = (datas: readonly string[]): string[] => datas.map((d) => d.replace('"model":"m"', '"model":"shared-model"'))
  const stream = (from: number): string[] => withModel([...simStream(WORDS.slice(from, from + 5)), simFinish(`1796029993${from}.5`)])
  const first = agree(t, stream(0), 'the first stream')
  t.equal(first.matched, 4, 'the first stream learns the role, text and finish chunks: 3 full parses')
  const second = agree(t, stream(3), 'the second stream')
  t.equal(second.matched, 7, 'the second stream takes none through the full parse')
  const summary = run(new OpenAIChatParser(ctx()), perEvent(stream(5))).summary
  t.equal(summary.model, 'shared-model', "the model is the template's")
})

t.test('a chunk without content read by a template agrees with the full parse, and its variants do not match', async (t) => {
  const learned = simFinish('1796029992600.5', 'quiet-model')
  const variants = [
    learned,
    learned.replace('"finish_reason":"stop"', '"finish_reason":"length"'),
    learned.replace('"delta":{}', '"delta":{"content":null}'),
    learned.replace('"delta":{}', '"delta":{"content":" late"}'),
    learned.replace('"delta":{}', '"delta":{"content":[{"type":"text","text":"hi"}]}'),
    learned.replace('"delta":{}', '"delta":{"refusal":"no"}'),
    learned.replace('"delta":{}', '"delta":{"reasoning_content":"hm"}'),
    learned.replace('"delta":{}', '"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}'),
    learned.replace('}]}', '}],"usage":{"prompt_tokens":3,"completion_tokens":9}}'),
    learned.replace('}]}', '}],"x_groq":{"usage":{"completion_tokens":9}}}'),
    learned.replace('}]}', '}],"timings":{"predicted_n":9}}'),
    learned.replace('}]}', '}],"error":{"code":"boom"}}'),
    learned.replace('"model":"quiet-model"', '"model":"other"'),
    learned.replace('"finish_reason":"stop"}]', '"finish_reason":"stop","text":"x"}]'),
  ]
  for (const [i, v] of variants.entries()) agree(t, [learned, v, learned], `variant ${i}`)
  const fast = agree(t, [learned, learned.replace('1796029992600.5', '1796029992601.5')], 'again')
  t.equal(fast.matched, 2, 'both read by the template learned before')
})

t.test('randomly mutated chunks without content after a learned template get exactly the full parse result', async (t) => {
  const base = [...simStream(WORDS.slice(0, 3)), simFinish('1796029992700.5'), simFinish('1796029992701.5')]
  const alphabet = ['"', '\\', '{', '}', '[', ']', ',', ':', '0', '1', '.', '-', 'e', 'a', ' ', '\n', '\u0001', 'u']
  const mutation = fc.record({ at: fc.nat(), op: fc.constantFrom('insert', 'delete', 'replace'), ch: fc.constantFrom(...alphabet) })
  fc.assert(
    fc.property(fc.array(mutation, { minLength: 1, maxLength: 3 }), (ms) => {
      const datas = [...base]
      const last = datas.length - 1
      for (const m of ms) {
        const d = datas[last]
        const at = m.at % (d.length + 1)
        datas[last] = m.op === 'insert' ? d.slice(0, at) + m.ch + d.slice(at) : m.op === 'delete' ? d.slice(0, at) + d.slice(at + 1) : d.slice(0, at) + m.ch + d.slice(at + 1)
      }
      const fast = run(new OpenAIChatParser(ctx()), perEvent(datas))
      const full = run(new FullParseOnly(ctx()), perEvent(datas))
      return JSON.stringify(fast) === JSON.stringify(full)
    }),
    { numRuns: 2000, seed: 11 },
  )
  t.pass('2000 mutated streams agree')
})

t.test('a shape without a content path has no content hole', async (t) => {
  const shape = shapeOf('{"id":"x","model":"m","choices":[{"delta":{},"finish_reason":"stop"}]}', undefined, (key) => key === 'model' || key === 'delta')
  if (shape === undefined) throw new Error('no shape')
  t.equal(shape.content, -1)
  const tpl = new EventTemplate(shape)
  t.equal(tpl.match('{"id":"y","model":"m","choices":[{"delta":{},"finish_reason":"length"}]}'), '', 'a match reads no content')
  t.equal(tpl.match('{"id":"y","model":"m","choices":[{"delta":{"content":"a"}},"finish_reason":"length"}]}'), undefined)
})
