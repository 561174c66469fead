/**
 * The text of a stream's JSON events, learned so that the next event can be read without
 * `JSON.parse`.
 *
 * Streaming APIs send the same object again and again: the same keys in the same order, and only
 * scalars changing (the generated text, ids, a timestamp, a padding string). A {@link JsonShape}
 * is one event's text cut at its member scalars (numbers and strings that are an object member's
 * value); an {@link EventTemplate} matches any event with the same text outside those scalars.
 *
 * Exactness: a template is only built from an event that `JSON.parse` accepted and that has no
 * duplicate keys, and members the reader looks at (`fixed`) are never holes. An event that matches
 * differs from it only in hole values, each a valid JSON number (in a number hole) or a string
 * without quotes, backslashes or control characters (in a string hole); the content hole is any
 * valid JSON string, decoded exactly as `JSON.parse` would. So a matching event is valid JSON with
 * the same structure and the same values wherever the reader looks, but the content. Anything
 * else (a cut, a splice, a changed key) does not match.
 */

const QUOTE = 34
const BACKSLASH = 92
const COLON = 58

/** What a hole may hold. */
const Hole = { number: 0, string: 1, content: 2 } as const
type Hole = (typeof Hole)[keyof typeof Hole]

/** One event's text cut at its member scalars: `lits[0] vals[0] lits[1] … lits[n]`. */
export interface JsonShape {
  readonly lits: readonly string[]
  readonly vals: readonly string[]
  readonly kinds: readonly Hole[]
  /** Index of the content value in `vals` (-1: the shape has no content hole). */
  readonly content: number
}

interface Frame {
  /** Keys seen so far; undefined for an array. */
  readonly keys: Set<string> | undefined
  /** The key (or index) this container is the value of. */
  readonly name: string | number
  /** Current member key (object) or element index (array). */
  key: string
  index: number
}

/**
 * Bounds on what may become a template: templates are shared by every stream of the process, so
 * nothing one response sends may make one costly or uncompilable (an event of 10,000 members or
 * nested 10,000 deep makes a pattern V8 cannot run). A chat chunk has about ten holes, depth 5.
 */
const MAX_HOLES = 64
const MAX_DEPTH = 16
const MAX_LITERAL_CHARS = 4096

const isSpace = (c: number): boolean => c === 32 || c === 10 || c === 13 || c === 9
const isNumberChar = (c: number): boolean => (c >= 48 && c <= 57) || c === 45 || c === 43 || c === 46 || c === 101 || c === 69

/** Index of the quote closing the string that opens at `open` (the first quote not escaped). */
function closingQuote(text: string, open: number): number {
  let end = open
  for (;;) {
    end = text.indexOf('"', end + 1)
    if (end < 0) return -1
    let k = end - 1
    while (text.charCodeAt(k) === BACKSLASH) k--
    if ((end - 1 - k) % 2 === 0) return end
  }
}

/** Whether a string's raw text is its value (no escapes): then it can be a string hole. */
function isRawString(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i)
    if (c === BACKSLASH || c < 32) return false
  }
  return true
}

/**
 * Cuts `text`, which `JSON.parse` accepted, at its member scalars. `contentPath` names the string
 * that is the content hole (keys, and element indexes for arrays), or is undefined for an event
 * without content (then the shape has no content hole); `fixed(key)` says which members must
 * never become holes (values the reader looks at). Undefined when an object repeats a key or
 * the content string is not there.
 */
export function shapeOf(text: string, contentPath: readonly (string | number)[] | undefined, fixed: (key: string) => boolean): JsonShape | undefined {
  const lits: string[] = []
  const vals: string[] = []
  const kinds: Hole[] = []
  let content = -1
  let litStart = 0
  const frames: Frame[] = []
  let literal = 0
  const hole = (from: number, to: number, kind: Hole): void => {
    literal += from - litStart
    lits.push(text.slice(litStart, from))
    vals.push(text.slice(from, to))
    kinds.push(kind)
    litStart = to
  }
  /** Whether the member being read sits at `contentPath`. */
  const atContent = (): boolean => {
    if (contentPath === undefined || frames.length !== contentPath.length) return false
    for (let d = 1; d < frames.length; d++) if (frames[d].name !== contentPath[d - 1]) return false
    const top = frames[frames.length - 1]
    return (top.keys !== undefined ? top.key : top.index) === contentPath[contentPath.length - 1]
  }
  let i = 0
  const n = text.length
  while (i < n) {
    const c = text.charCodeAt(i)
    const top = frames[frames.length - 1] as Frame | undefined
    if (vals.length > MAX_HOLES || literal > MAX_LITERAL_CHARS) return undefined
    if (c === 123 /* { */ || c === 91 /* [ */) {
      if (frames.length >= MAX_DEPTH) return undefined
      const name = top === undefined ? '' : top.keys !== undefined ? top.key : top.index
      frames.push({ keys: c === 123 ? new Set() : undefined, name, key: '', index: 0 })
      i++
    } else if (c === 125 /* } */ || c === 93 /* ] */) {
      frames.pop()
      i++
    } else if (c === 44 /* , */) {
      if (top !== undefined && top.keys === undefined) top.index++
      i++
    } else if (c === QUOTE) {
      const end = closingQuote(text, i)
      if (end < 0) return undefined
      let j = end + 1
      while (isSpace(text.charCodeAt(j))) j++
      if (top?.keys !== undefined && text.charCodeAt(j) === COLON) {
        const key = isRawString(text, i + 1, end) ? text.slice(i + 1, end) : (JSON.parse(text.slice(i, end + 1)) as string)
        if (top.keys.has(key)) return undefined
        top.keys.add(key)
        top.key = key
        i = j + 1
        continue
      }
      if (atContent()) {
        if (content >= 0) return undefined
        content = vals.length
        hole(i + 1, end, Hole.content)
      } else if (top?.keys !== undefined && !fixed(top.key) && isRawString(text, i + 1, end)) {
        hole(i + 1, end, Hole.string)
      }
      i = end + 1
    } else if (c === 45 || (c >= 48 && c <= 57)) {
      let j = i + 1
      while (j < n && isNumberChar(text.charCodeAt(j))) j++
      if (top?.keys !== undefined && !fixed(top.key)) hole(i, j, Hole.number)
      i = j
    } else {
      i++
    }
  }
  if (content < 0 && contentPath !== undefined) return undefined
  if (vals.length > MAX_HOLES || literal + n - litStart > MAX_LITERAL_CHARS) return undefined
  lits.push(text.slice(litStart))
  return { lits, vals, kinds, content }
}

/** A JSON number (RFC 8259 §6). */
const NUMBER = '-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?'
/** A string's text without escapes: no quote, backslash or control character. */
const RAW = '[^"\\\\\\x00-\\x1f]*'
/** Any valid string's text, captured (escapes are checked when decoded). */
const STRING = '([^"\\\\\\x00-\\x1f]*(?:\\\\[^\\n\\r\\u2028\\u2029][^"\\\\\\x00-\\x1f]*)*)'
const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

/**
 * Compiled templates by shape: a stream learns its template from its first chunks, and the
 * streams of one upstream and model share one pattern (ids, timestamps and paddings are holes),
 * so each is compiled once per process, not once per request.
 */
const compiled = new Map<string, RegExp>()
const MAX_COMPILED = 256

/**
 * The shape's text as one regular expression: the literal text exactly, a JSON number in each
 * number hole, a string without escapes in each string hole, and any string (captured) in the
 * content hole. One native match per event, no string built but the content.
 */
export class EventTemplate {
  readonly #re: RegExp
  readonly #key: string
  readonly #holes: number
  readonly #content: boolean
  #broken = false

  /**
   * The template of `shape`, cut from `data`, when it compiles and reads `data` back; undefined
   * otherwise (V8 compiles a pattern on its first use, so only a match proves it runs), so a
   * template that fails is never shared.
   */
  static of(shape: JsonShape, data: string): EventTemplate | undefined {
    let template: EventTemplate
    try {
      template = new EventTemplate(shape)
    } catch {
      return undefined
    }
    if (template.match(data) === undefined) {
      template.#forget()
      return undefined
    }
    return template
  }

  constructor(shape: JsonShape) {
    // Keyed by the shape itself (literals and hole kinds); the pattern is only written on a miss.
    const key = `${shape.kinds.join('')}\u0000${shape.lits.join('\u0000')}`
    this.#key = key
    let re = compiled.get(key)
    if (re === undefined) {
      const parts = ['^', escapeRegExp(shape.lits[0])]
      for (let h = 0; h < shape.vals.length; h++) {
        const kind = shape.kinds[h]
        parts.push(kind === Hole.number ? NUMBER : kind === Hole.string ? RAW : STRING, escapeRegExp(shape.lits[h + 1]))
      }
      parts.push('$')
      if (compiled.size >= MAX_COMPILED) compiled.clear()
      re = new RegExp(parts.join(''))
      compiled.set(key, re)
    }
    this.#re = re
    this.#holes = shape.vals.length
    this.#content = shape.content >= 0
  }

  /** The pattern threw when run: the template matches nothing from now on and must be dropped. */
  get broken(): boolean {
    return this.#broken
  }

  #forget(): void {
    if (compiled.get(this.#key) === this.#re) compiled.delete(this.#key)
  }

  /** Number of holes (the content included). */
  get holes(): number {
    return this.#holes
  }

  /** The content string's value when `data` matches ('' for a shape without content), else undefined. */
  match(data: string): string | undefined {
    if (this.#broken) return undefined
    let m: RegExpExecArray | null
    try {
      m = this.#re.exec(data)
    } catch {
      // A pattern V8 cannot run (too large, too deep): this template reads nothing, and no other
      // one may get it from the compiled cache.
      this.#broken = true
      this.#forget()
      return undefined
    }
    if (m === null) return undefined
    if (!this.#content) return ''
    const content = m[1]
    if (content.indexOf('\\') < 0) return content
    // Escapes (\n, \", \uXXXX): JSON decodes the string alone; a bad one fails the match.
    try {
      return JSON.parse(`"${content}"`) as string
    } catch {
      return undefined
    }
  }
}
