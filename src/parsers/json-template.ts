/**
 * The text of a stream's JSON events, learned so that the next event can be read without
 * `JSON.parse`.
 *
 * Streaming APIs send the same object again and again: the same keys in the same order, the same
 * ids, and only a few scalars changing (the generated text, a timestamp, a padding string). A
 * {@link JsonShape} is one event's text cut at its member scalars (numbers and strings that are an
 * object member's value); an {@link EventTemplate} is built from two shapes of the same skeleton:
 * the scalars that differed become holes, everything else must match byte for byte.
 *
 * Exactness: a template is only built from events that `JSON.parse` accepted and that have no
 * duplicate keys. An event that matches differs from them only in hole values, each checked to be a
 * valid JSON number (in a number hole) or a string without quotes, backslashes or control
 * characters (in a string hole); the content hole is any valid JSON string, decoded exactly as
 * `JSON.parse` would. So a matching event is valid JSON with the same structure and the same
 * values outside the holes. Anything else (a cut, a splice, a changed key) does not match.
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
  /** Index of the content value in `vals`. */
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
 * that is the content hole (keys, and element indexes for arrays); `fixed(key)` says which members
 * must never become holes (values the reader looks at). Undefined when an object repeats a key or
 * the content string is not there.
 */
export function shapeOf(text: string, contentPath: readonly (string | number)[], fixed: (key: string) => boolean): JsonShape | undefined {
  const lits: string[] = []
  const vals: string[] = []
  const kinds: Hole[] = []
  let content = -1
  let litStart = 0
  const frames: Frame[] = []
  const hole = (from: number, to: number, kind: Hole): void => {
    lits.push(text.slice(litStart, from))
    vals.push(text.slice(from, to))
    kinds.push(kind)
    litStart = to
  }
  /** Whether the member being read sits at `contentPath`. */
  const atContent = (): boolean => {
    if (frames.length !== contentPath.length) return false
    for (let d = 1; d < frames.length; d++) if (frames[d].name !== contentPath[d - 1]) return false
    const top = frames[frames.length - 1]
    return (top.keys !== undefined ? top.key : top.index) === contentPath[contentPath.length - 1]
  }
  let i = 0
  const n = text.length
  while (i < n) {
    const c = text.charCodeAt(i)
    const top = frames[frames.length - 1] as Frame | undefined
    if (c === 123 /* { */ || c === 91 /* [ */) {
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
  if (content < 0) return undefined
  lits.push(text.slice(litStart))
  return { lits, vals, kinds, content }
}

/** End of the JSON number at `pos` (RFC 8259 §6), or -1 when there is none. */
function numberEnd(data: string, pos: number): number {
  if (data.charCodeAt(pos) === 45) pos++
  let c = data.charCodeAt(pos)
  if (c === 48) pos++
  else if (c >= 49 && c <= 57) {
    do c = data.charCodeAt(++pos)
    while (c >= 48 && c <= 57)
  } else return -1
  if (data.charCodeAt(pos) === 46) {
    c = data.charCodeAt(++pos)
    if (!(c >= 48 && c <= 57)) return -1
    do c = data.charCodeAt(++pos)
    while (c >= 48 && c <= 57)
  }
  c = data.charCodeAt(pos)
  if (c === 101 || c === 69) {
    c = data.charCodeAt(++pos)
    if (c === 43 || c === 45) c = data.charCodeAt(++pos)
    if (!(c >= 48 && c <= 57)) return -1
    do c = data.charCodeAt(++pos)
    while (c >= 48 && c <= 57)
  }
  return pos
}

/**
 * Literal text with holes between: matches an event that has the literal text exactly and a valid
 * value in each hole, and returns the content string's value.
 */
export class EventTemplate {
  readonly #lits: readonly string[]
  readonly #kinds: readonly Hole[]
  /** The literal text after the last hole. */
  readonly #tail: string
  /** Which of the shape's scalars are holes (carried over to the next template). */
  readonly #holeIndexes: Set<number>

  /**
   * From the latest shape and the one before it: when they have the same skeleton, every scalar
   * that differs becomes a hole (and every hole of `previous`'s template stays one); otherwise only
   * the content is a hole.
   */
  constructor(shape: JsonShape, previous?: { shape: JsonShape; template: EventTemplate }) {
    const open = new Array<boolean>(shape.vals.length).fill(false)
    open[shape.content] = true
    if (previous !== undefined && sameSkeleton(shape, previous.shape)) {
      const was = previous.template.#holeIndexes
      for (let h = 0; h < shape.vals.length; h++) if (shape.vals[h] !== previous.shape.vals[h] || was.has(h)) open[h] = true
    }
    const lits: string[] = []
    const kinds: Hole[] = []
    const indexes = new Set<number>()
    // Literals are joined from parts: join gives a flat string, which startsWith reads fast
    // (a string built with += is a tree that it walks for every character).
    let lit = [shape.lits[0]]
    for (let h = 0; h < shape.vals.length; h++) {
      if (open[h]) {
        lits.push(lit.join(''))
        kinds.push(shape.kinds[h])
        indexes.add(h)
        lit = [shape.lits[h + 1]]
      } else {
        lit.push(shape.vals[h], shape.lits[h + 1])
      }
    }
    this.#lits = lits
    this.#kinds = kinds
    this.#tail = lit.join('')
    this.#holeIndexes = indexes
  }

  /** Number of holes (the content included). */
  get holes(): number {
    return this.#kinds.length
  }

  /** The content string's value when `data` matches, else undefined. */
  match(data: string): string | undefined {
    const lits = this.#lits
    const kinds = this.#kinds
    const n = data.length
    let pos = 0
    let content: string | undefined
    for (let h = 0; h < kinds.length; h++) {
      const lit = lits[h]
      // slice + === compares natively; startsWith on strings not known to the compiler is a slow loop.
      if (data.slice(pos, pos + lit.length) !== lit) return undefined
      pos += lit.length
      const kind = kinds[h]
      if (kind === Hole.number) {
        pos = numberEnd(data, pos)
        if (pos < 0) return undefined
        continue
      }
      // A string hole (its quotes are in the literals): up to the closing quote.
      const start = pos
      let escaped = false
      for (;;) {
        if (pos >= n) return undefined
        const c = data.charCodeAt(pos)
        if (c === QUOTE) break
        if (c < 32) return undefined
        if (c === BACKSLASH) {
          if (kind !== Hole.content) return undefined
          escaped = true
          pos++
        }
        pos++
      }
      if (kind === Hole.content) {
        if (!escaped) content = data.slice(start, pos)
        else {
          // Escapes (\n, \", \uXXXX): JSON decodes the string alone; a bad one fails the match.
          try {
            content = JSON.parse(data.slice(start - 1, pos + 1)) as string
          } catch {
            return undefined
          }
        }
      }
    }
    const tail = this.#tail
    if (pos + tail.length !== n || data.slice(pos) !== tail) return undefined
    return content
  }
}

function sameSkeleton(a: JsonShape, b: JsonShape): boolean {
  if (a.content !== b.content || a.vals.length !== b.vals.length) return false
  for (let h = 0; h < a.kinds.length; h++) if (a.kinds[h] !== b.kinds[h]) return false
  for (let h = 0; h < a.lits.length; h++) if (a.lits[h] !== b.lits[h]) return false
  return true
}
