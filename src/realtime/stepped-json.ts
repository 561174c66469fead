/**
 * One JSON text parsed from its UTF-8 bytes in steps bounded by bytes, with exactly the result of
 * `JSON.parse(bytes.toString('utf8'))` (or its failure): a realtime message of up to
 * `limits.max_event_bytes` inflated over turns is parsed over turns too, since one `JSON.parse`
 * of 1 MiB holds the event loop for milliseconds (docs/performance.md, "Inflating realtime
 * messages per turn"). The grammar is RFC 8259's (https://www.rfc-editor.org/rfc/rfc8259), as V8
 * reads it. A string is decoded in pieces cut only where UTF-8 decoding is at a character's start
 * (`cutsClean`) and never inside an escape, so the pieces decode to the whole's code units; a piece with
 * escapes goes through `JSON.parse` as a string literal of its own (a surrogate pair split across
 * pieces joins again as the same code units).
 */

const VALUE = 0
/** After `[`: a value or `]`. */
const VALUE_OR_CLOSE = 1
/** After `{`: a key or `}`. */
const KEY_OR_CLOSE = 2
const KEY = 3
const COLON = 4
/** A value ended: `,`, the container's closer, or the end of the text. */
const AFTER = 5
const STRING = 6
const DONE = 7
const FAILED = 8

/** A step goes through at least this many bytes, so a session short of room still advances. */
const MIN_STEP = 1024
/**
 * What a token (a container, a key, a value) costs of a step's room beyond its bytes: building
 * objects costs more than reading bytes, so a text of tiny tokens (`[[[[…`, 60,000 one-letter
 * keys) would otherwise take 50–100 ms a 128 KiB step.
 */
const TOKEN_COST = 128

/**
 * What a key costs beyond its tokens: V8 adds a new key to the string table and the object's
 * dictionary, about 2 µs a key with fresh names (an attacker's), against 0.1–0.2 µs for a value;
 * at TOKEN_COST alone a 128 KiB step of 250 keys took 0.4–1.2 ms (docs/performance.md).
 */
const KEY_COST = 1024

/**
 * What an escape costs beyond its bytes: skipping it, and JSON.parse decoding it (about 11 ns);
 * a step of 64 KiB of `\n` took 1–2 ms when escapes cost their bytes alone.
 */
const ESCAPE_COST = 16

/**
 * What a separator costs a whole `JSON.parse` of a turn's room. JSON.parse spends far less a token
 * than SteppedJson: a text costing a whole turn's room (128 KiB) at 64 a separator took at most
 * 0.38 ms on Node 20 in the costliest shapes measured (2,000 nested arrays or objects; 0.85 ms at
 * 32 a separator). A backslash costs as much: JSON.parse decodes an escape in about 11 ns (64 KiB
 * of `\n`: 0.37 ms), and fewer searches bound it than one a byte.
 */
const SEPARATOR_COST = 64

/**
 * What a key (its `:`) costs a whole `JSON.parse` beyond its separator: 1,700 keys of fresh names
 * in one object (an attacker's, each new to V8's string table) took 1.1–1.8 ms, the same text with
 * names seen before 0.4–0.7 ms; at 192 a key a text admitted holds at most 682 (0.3–0.45 ms with
 * fresh names). More would send the last of a read's 14 compressed audio events (three keys each)
 * to the next turn.
 */
const WHOLE_KEY_COST = 128

/** The characters a whole parse's cost counts, each with its cost. */
const COUNTED: readonly (readonly [string, number])[] = [
  [',', SEPARATOR_COST],
  [':', WHOLE_KEY_COST],
  ['{', SEPARATOR_COST],
  ['[', SEPARATOR_COST],
  ['\\', SEPARATOR_COST],
]

/**
 * The most keys one object of a text may hold (counted as written, a repeated key too); a text
 * with more is refused, read no further (`failed`). V8 grows an object's dictionary by rehashing it
 * whole as it passes each size, in one step: past 2,816 keys 0.4 ms, 5,632 0.6–1.4 ms, 11,008
 * 1.3–2.5 ms, 22,016 2–7 ms, 43,776 5–13 ms (Node 20, adding keys 256 at a time, the worst add);
 * 4,096 keys keep every rehash well under a turn's 1 ms. Realtime events hold at most hundreds
 * of keys in one object (docs/realtime.md, docs/performance.md).
 */
export const MAX_OBJECT_KEYS = 4096

/**
 * The deepest a text's arrays and objects may nest; a text nesting deeper is refused, read no
 * further (`failed`). The containers being read are held in arrays V8 grows by half as they fill,
 * copying every slot (and noting each one that points at a young object): past 13,954 and 20,947
 * levels a step took 0.6–2 ms for that alone. A whole parse admits at most 2,048 `[` and `{`
 * (wholeCost), so it never nests deeper; realtime events nest a few levels.
 */
export const MAX_DEPTH = 2048

/** How many times `c` is in `text`, counted up to `most` + 1 at the most. */
function occurrences(text: string, c: string, most: number): number {
  let n = 0
  for (let i = text.indexOf(c); i >= 0 && n <= most; i = text.indexOf(c, i + 1)) n++
  return n
}

/**
 * What reading a JSON text whole, with one `JSON.parse`, costs of a turn's room, in SteppedJson's
 * units: its bytes, SEPARATOR_COST for each `,` `[` `{` `\\` in it (a key or a value follows each of
 * the first three, so they bound its tokens) and WHOLE_KEY_COST more for each `:`; those inside
 * strings count too, so it is a bound. Node 20 spends 0.6–5 ns a byte (base64 to multi-byte
 * UTF-8). Undefined when it costs more than `limit`, found without looking further: deciding
 * costs at most `limit / SEPARATOR_COST` searches, native ones over the decoded text (`indexOf`; a
 * loop over the bytes in JavaScript costs 10–30 times more for an audio event). The text comes
 * back decoded for `JSON.parse`. A text it admits holds at most `limit / (SEPARATOR_COST +
 * WHOLE_KEY_COST)` keys (682 for a turn's 128 KiB), within MAX_OBJECT_KEYS, so a whole parse never
 * builds an object SteppedJson would refuse.
 */
export function wholeCost(bytes: Buffer, limit: number): { readonly text: string; readonly cost: number } | undefined {
  if (bytes.length > limit) return undefined
  const text = bytes.toString('utf8')
  let room = limit - bytes.length
  for (const [c, cost] of COUNTED) {
    room -= occurrences(text, c, Math.floor(room / cost)) * cost
    if (room < 0) return undefined
  }
  return { text, cost: limit - room }
}

/** Bytes looked at one by one before a native search (`#next`). */
const NEAR = 32
/** `#next`'s bytes: `"` and `\\`. */
const QUOTE = 0
const SLASH = 1

const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39
/** A JSON string holds no raw control character (RFC 8259 §7): none below U+0020. */
const CONTROL = /[^ -\uffff]/

const continues = (c: number): boolean => (c & 0xc0) === 0x80

/**
 * Whether UTF-8 decoding is at a character's start before `b[p]`, so both sides of a cut there
 * decode alone to the whole's code units: `b[p]` does not continue a sequence, or the three bytes
 * before it all do (a sequence is at most four bytes; a byte continuing none is one U+FFFD on its
 * own). Of any four bytes in a row, one is such a place.
 */
function cutsClean(b: Buffer, p: number): boolean {
  return !continues(b[p]) || (continues(b[p - 1]) && continues(b[p - 2]) && continues(b[p - 3]))
}

export class SteppedJson {
  readonly #b: Buffer
  #i = 0
  #state = VALUE
  /**
   * The arrays and objects being read, innermost last, with each object's key being read and its
   * keys so far (MAX_OBJECT_KEYS at most): three stacks of values V8 always has the maps of, not an
   * object a container (a map made for such an object is let go at a full GC when none is alive,
   * with the optimized parser that checks it: the next text's first steps then ran 3–10× slower).
   */
  readonly #stack: (unknown[] | Record<string, unknown>)[] = []
  readonly #keys: string[] = []
  readonly #counts: number[] = []
  /** The string being read: a key, else a value; its text so far and where its unread piece starts. */
  #isKey = false
  #text = ''
  #piece = 0
  #escaped = false
  /**
   * The next `"` found (-1: none) at or after where it was last looked for (-1: not yet), and the
   * same for `\\`: the text is read forwards, so each byte is searched once, not once a string (a
   * search for `\\` over the rest of a step's window at every key took 3–10 ms a step of 256 keys).
   * Whole numbers in fields of their own: an array that once held Infinity changed its map, and
   * the optimized parser checking it was thrown away at the next full GC.
   */
  #quoteAt = -1
  #quoteFrom = -1
  #slashAt = -1
  #slashFrom = -1
  #value: unknown
  /** Bytes the last `step` went through. */
  used = 0
  /** What the last `step` cost of its room: its bytes, `TOKEN_COST` a token, `KEY_COST` a key and `ESCAPE_COST` an escape. */
  spent = 0
  /** What the current step's keys and escapes cost. */
  #extra = 0

  constructor(text: Buffer) {
    this.#b = text
  }

  /** The parsed value once `step` returned true; undefined when the text is not JSON, holds an object of more than MAX_OBJECT_KEYS keys or nests deeper than MAX_DEPTH. */
  get value(): unknown {
    return this.#value
  }

  get failed(): boolean {
    return this.#state === FAILED
  }

  /** Bytes held (the text). */
  get held(): number {
    return this.#b.length
  }

  /** Parses about `room` more bytes (at least MIN_STEP); true once the text is parsed or failed. */
  step(room: number): boolean {
    const b = this.#b
    const end = b.length
    const start = this.#i
    const budget = Math.max(MIN_STEP, room)
    const stop = Math.min(end, start + budget)
    let i = start
    let tokens = 0
    this.#extra = 0
    for (;;) {
      if (this.#state === FAILED) break
      if (this.#state === STRING) {
        // The room's end, not the text's: escapes shorten the window from there.
        i = this.#string(i, start + budget)
        if (this.#state === STRING) break
        continue
      }
      while (i < stop && isSpace(b[i])) i++
      // Out of room between two tokens (or in a run of whitespace).
      if (i >= stop && i < end) break
      if (this.#state === DONE) {
        if (i < end) this.#fail()
        break
      }
      if (i >= end) {
        this.#fail()
        break
      }
      if (i - start + tokens * TOKEN_COST + this.#extra >= budget) break
      tokens++
      i = this.#token(i)
    }
    this.used = i - start
    this.spent = this.used + tokens * TOKEN_COST + this.#extra
    this.#i = i
    return this.#state === DONE || this.#state === FAILED
  }

  #fail(): void {
    this.#state = FAILED
    this.#value = undefined
    this.#stack.length = 0
    this.#keys.length = 0
    this.#counts.length = 0
    this.#text = ''
  }

  /** Reads the token at `i` (not whitespace) in the current state; returns where it ends. */
  #token(i: number): number {
    const c = this.#b[i]
    switch (this.#state) {
      case VALUE_OR_CLOSE:
        if (c === 0x5d /* ] */) return this.#close(i)
        return this.#startValue(i, c)
      case VALUE:
        return this.#startValue(i, c)
      case KEY_OR_CLOSE:
        if (c === 0x7d /* } */) return this.#close(i)
        return this.#startKey(i, c)
      case KEY:
        return this.#startKey(i, c)
      case COLON:
        if (c !== 0x3a /* : */) return this.#failAt(i)
        this.#state = VALUE
        return i + 1
      default: {
        // AFTER: the stack is not empty (an empty one is DONE).
        const array = Array.isArray(this.#stack[this.#stack.length - 1])
        if (c === 0x2c /* , */) {
          this.#state = array ? VALUE : KEY
          return i + 1
        }
        if (c === (array ? 0x5d : 0x7d)) return this.#close(i)
        return this.#failAt(i)
      }
    }
  }

  #failAt(i: number): number {
    this.#fail()
    return i
  }

  #startKey(i: number, c: number): number {
    if (c !== 0x22) return this.#failAt(i)
    const top = this.#counts.length - 1
    if (++this.#counts[top] > MAX_OBJECT_KEYS) return this.#failAt(i)
    this.#extra += KEY_COST
    this.#isKey = true
    return this.#open(i + 1)
  }

  #startValue(i: number, c: number): number {
    const b = this.#b
    if (c === 0x22 /* " */) {
      this.#isKey = false
      return this.#open(i + 1)
    }
    if ((c === 0x7b || c === 0x5b) && this.#stack.length === MAX_DEPTH) return this.#failAt(i)
    if (c === 0x7b /* { */) {
      this.#push({})
      this.#state = KEY_OR_CLOSE
      return i + 1
    }
    if (c === 0x5b /* [ */) {
      this.#push([])
      this.#state = VALUE_OR_CLOSE
      return i + 1
    }
    if (c === 0x74 /* t */ && b[i + 1] === 0x72 && b[i + 2] === 0x75 && b[i + 3] === 0x65)
      return this.#emit(true, i + 4)
    if (c === 0x66 /* f */ && b[i + 1] === 0x61 && b[i + 2] === 0x6c && b[i + 3] === 0x73 && b[i + 4] === 0x65)
      return this.#emit(false, i + 5)
    if (c === 0x6e /* n */ && b[i + 1] === 0x75 && b[i + 2] === 0x6c && b[i + 3] === 0x6c)
      return this.#emit(null, i + 4)
    return this.#number(i)
  }

  /** -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, converted as JSON.parse converts it. */
  #number(i: number): number {
    const b = this.#b
    let j = i
    if (b[j] === 0x2d /* - */) j++
    if (b[j] === 0x30) j++
    else if (isDigit(b[j])) while (isDigit(b[j])) j++
    else return this.#failAt(i)
    if (b[j] === 0x2e /* . */) {
      j++
      if (!isDigit(b[j])) return this.#failAt(i)
      while (isDigit(b[j])) j++
    }
    if (b[j] === 0x65 || b[j] === 0x45 /* e E */) {
      j++
      if (b[j] === 0x2b || b[j] === 0x2d) j++
      if (!isDigit(b[j])) return this.#failAt(i)
      while (isDigit(b[j])) j++
    }
    return this.#emit(Number(b.toString('latin1', i, j)), j)
  }

  #open(i: number): number {
    this.#state = STRING
    this.#text = ''
    this.#piece = i
    this.#escaped = false
    return i
  }

  /**
   * Reads the open string from `i`, up to its end or a cut at about `stop`. The bytes are searched
   * natively (a loop over them in JavaScript costs as much as JSON.parse before it is compiled):
   * `"` and `\\` by `indexOf`, each escape skipped whole; `#take` has JSON.parse check the escapes.
   */
  #string(i: number, stop: number): number {
    const b = this.#b
    const end = b.length
    for (;;) {
      // The window ends at `stop` less what this step's keys and escapes cost, each escape making it shorter.
      const limit = Math.max(stop - this.#extra, i + 1)
      let window = limit
      // Positions in the text, Infinity for none; the escapes before the closing quote are skipped
      // whole, and a quote found inside one (`\"`) is searched for again after it.
      let quote = this.#next(QUOTE, i)
      let slash = this.#next(SLASH, i)
      let at = i
      while (slash < window && slash < quote) {
        // `\uXXXX` or a two-byte escape; a malformed one fails in `#take`.
        at = slash + (b[slash + 1] === 0x75 ? 6 : 2)
        this.#escaped = true
        this.#extra += ESCAPE_COST
        window -= ESCAPE_COST
        if (at > end) return this.#failAt(end)
        if (quote < at) quote = this.#next(QUOTE, at)
        slash = this.#next(SLASH, at)
      }
      if (quote < window) {
        const close = quote
        if (!this.#take(close)) return this.#failAt(close)
        const text = this.#text
        this.#text = ''
        if (!this.#isKey) return this.#emit(text, close + 1)
        this.#keys[this.#keys.length - 1] = text
        this.#state = COLON
        return close + 1
      }
      if (window >= end) return this.#failAt(end)
      // Past the window's last escape: an escape's end is a clean cut, as is a byte starting a character.
      const from = at
      let cut = Math.max(window, from)
      while (cut > from && !cutsClean(b, cut)) cut--
      if (cut === i) {
        i = limit
        continue
      }
      if (!this.#take(cut)) return this.#failAt(cut)
      this.#piece = cut
      this.#escaped = false
      return cut
    }
  }

  /** Where the next `QUOTE` or `SLASH` byte is at or after `from` (Infinity: none). */
  #next(which: typeof QUOTE | typeof SLASH, from: number): number {
    const found = which === QUOTE ? this.#quoteAt : this.#slashAt
    const after = which === QUOTE ? this.#quoteFrom : this.#slashFrom
    if (after >= 0 && after <= from && (found < 0 || found >= from)) return found < 0 ? Number.POSITIVE_INFINITY : found
    const b = this.#b
    const byte = which === QUOTE ? 0x22 : 0x5c
    // A near one (a short key's quote, the next of a run of escapes) is found in a few bytes: a
    // native search costs about 0.1 µs a call, which made a string of 32,000 `\n` 60 ns an escape.
    const near = Math.min(b.length, from + NEAR)
    let at = from
    while (at < near && b[at] !== byte) at++
    if (at === near) at = near === b.length ? -1 : b.indexOf(byte, near)
    if (which === QUOTE) {
      this.#quoteAt = at
      this.#quoteFrom = from
    } else {
      this.#slashAt = at
      this.#slashFrom = from
    }
    return at < 0 ? Number.POSITIVE_INFINITY : at
  }

  /** Appends the string's piece up to `i`; false when it holds what a JSON string may not. */
  #take(i: number): boolean {
    if (i === this.#piece) return true
    const piece = this.#b.toString('utf8', this.#piece, i)
    if (!this.#escaped) {
      if (CONTROL.test(piece)) return false
      this.#text += piece
      return true
    }
    try {
      // A string literal of its own: JSON.parse checks its escapes and characters.
      this.#text += JSON.parse(`"${piece}"`) as string
      return true
    } catch {
      return false
    }
  }

  #close(i: number): number {
    const done = this.#stack.pop()
    this.#keys.pop()
    this.#counts.pop()
    return this.#emit(done, i + 1)
  }

  #push(container: unknown[] | Record<string, unknown>): void {
    this.#stack.push(container)
    this.#keys.push('')
    this.#counts.push(0)
  }

  /** A value is whole: into its container, else it is the text's. */
  #emit(value: unknown, next: number): number {
    const depth = this.#stack.length
    if (depth === 0) {
      this.#value = value
      this.#state = DONE
    } else {
      const top = this.#stack[depth - 1]
      const key = this.#keys[depth - 1]
      if (Array.isArray(top)) top.push(value)
      // JSON.parse defines every key as an own property, `__proto__` too (an assignment would set the prototype).
      else if (key === '__proto__')
        Object.defineProperty(top, key, { value, writable: true, enumerable: true, configurable: true })
      else top[key] = value
      this.#state = AFTER
    }
    return next
  }

  /**
   * A parser alive as long as the process. V8 keeps the map of a class's instances (reached by
   * adding their fields, transitions it holds weakly) only while an instance has it: a full GC with
   * no parser alive let go of it, and of the optimized parser that checks it, so the next text's
   * steps ran unoptimized, 3–10× their time, until compiled again (docs/performance.md).
   */
  static readonly #resident: SteppedJson[] = []
  static {
    // Parsed, so that its fields hold what every parsed text's hold.
    const json = new SteppedJson(Buffer.from('{"a":[1,"b",{}]}'))
    json.step(0)
    SteppedJson.#resident.push(json)
  }
}
