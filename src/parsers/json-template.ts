/**
 * Templates of a stream's JSON events, so the next event can be read without `JSON.parse`: streaming
 * APIs resend the same object with only scalars changing.
 *
 * Exactness: a template comes from an event `JSON.parse` accepted with no duplicate keys, members the
 * reader looks at are never holes, and each hole admits only a valid JSON number or an escape-free
 * string (the content hole: any valid string, decoded as `JSON.parse` would). So a matching event is
 * valid JSON with the same values wherever the reader looks; a cut, splice or changed key never matches.
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

/** Templates are shared by the whole process, so no response may make one costly or uncompilable by V8. */
const MAX_HOLES = 64
const MAX_DEPTH = 16
const MAX_LITERAL_CHARS = 4096

const isSpace = (c: number): boolean => c === 32 || c === 10 || c === 13 || c === 9
const isNumberChar = (c: number): boolean =>
  (c >= 48 && c <= 57) || c === 45 || c === 43 || c === 46 || c === 101 || c === 69

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
 * Cuts `text` (already accepted by `JSON.parse`) at its member scalars, `contentPath` being the content
 * hole and `fixed` members never holes; undefined on a repeated key or a missing content string.
 */
export function shapeOf(
  text: string,
  contentPath: readonly (string | number)[] | undefined,
  fixed: (key: string) => boolean,
): JsonShape | undefined {
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
        const key = isRawString(text, i + 1, end)
          ? text.slice(i + 1, end)
          : (JSON.parse(text.slice(i, end + 1)) as string)
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

/** Compiled templates by shape: streams of one upstream and model share a pattern, compiled once per process. */
const compiled = new Map<string, RegExp>()
const MAX_COMPILED = 256

/** The shape as one regular expression: one native match per event, no string built but the content. */
export class EventTemplate {
  readonly #re: RegExp
  readonly #key: string
  readonly #holes: number
  readonly #content: boolean
  #broken = false

  /** The template of `shape` if it reads `data` back (V8 compiles on first use, so only a match proves it runs). */
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
      // A pattern V8 cannot run: drop it from the compiled cache too.
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
