import { countTokens, isHighSurrogate, isSpace, maxRunChars } from "../Models/Tokens.ts"
import { type Chunking, type ChunkingInput, type ChunkingStrategy, validateChunking } from "./Chunking.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * The chunk splitter: text in, chunks out, each within a hard token bound,
 * with exact character offsets, the heading path of its section and its page.
 *
 * Token counts are those of src/Models/Tokens.ts (o200k_base). Counting every
 * candidate chunk with the tokenizer would cost its speed several times over,
 * so the text is counted once, in pieces whose counts add up exactly: the
 * o200k pre-tokenizer never joins a non-space character with a following space
 * or tab into one piece, so cutting there changes no token, and the count of
 * any range is a sum of cached piece counts plus its two partial ends.
 */

/** A heading of the extracted text: where its line starts, its depth (1 = top) and its title. */
export interface Heading {
  readonly offset: number
  readonly level: number
  readonly title: string
}

export type DocumentKind = "text" | "markdown" | "html" | "json" | "csv" | "pdf" | "docx"

export interface SplitInput {
  readonly text: string
  /** Chooses the strategy `auto` uses; plain text when absent. */
  readonly kind?: DocumentKind | undefined
  /** Heading structure found by the extractor; markdown headings are parsed from the text when absent. */
  readonly headings?: ReadonlyArray<Heading> | undefined
  /** Offset where each page starts (the first is 0), for documents that have pages. */
  readonly pages?: ReadonlyArray<number> | undefined
}

export interface Chunk {
  readonly index: number
  /** Exactly `text.slice(startOffset, endOffset)`. */
  readonly content: string
  readonly tokenCount: number
  readonly startOffset: number
  readonly endOffset: number
  /** 1-based page of the chunk's start, for documents with pages. */
  readonly page?: number
  readonly headingPath: ReadonlyArray<string>
}

type Level = "paragraph" | "sentence" | "word" | "char"

/** The strategy `auto` resolves to for a kind of document. */
export const resolveStrategy = (strategy: ChunkingStrategy, kind: DocumentKind | undefined) =>
  strategy !== "auto" ? strategy : kind === "markdown" || kind === "html" || kind === "docx" ? "markdown" : "recursive"

// Letters and combining marks (\p{L}, \p{M}) of the basic plane, by code unit, classified on first sight.
const letterPattern = /^[\p{L}\p{M}]$/u
// Classes of basic-plane code units for the piece scan, filled on first sight.
const spaceClass = 1
const letterClass = 2 // \p{L} or \p{M}
const otherClass = 3 // surely neither, nor half of a surrogate pair
const surrogateClass = 4
const charClasses = new Uint8Array(0x10000)
const classify = (code: number) => {
  const kind = isSpace(code)
    ? spaceClass
    : code >= 0xd800 && code <= 0xdfff
      ? surrogateClass
      : letterPattern.test(String.fromCharCode(code))
        ? letterClass
        : otherClass
  charClasses[code] = kind
  return kind
}
for (let code = 0; code < 0x80; code++) classify(code)

const isLowSurrogate = (code: number) => code >= 0xdc00 && code <= 0xdfff

// A fixed locale, so boundaries do not depend on the host's; ICU finds Chinese,
// Japanese and Thai words by dictionary whatever the locale.
const sentences = new Intl.Segmenter("en", { granularity: "sentence" })
const words = new Intl.Segmenter("en", { granularity: "word" })

// A blank line (possibly holding spaces) ends a paragraph; the separator stays with the paragraph before.
const paragraphBreak = /\n[ \t\r]*\n[ \t\r\n]*/g

const sentenceEnd = /[.!?\u3002\uff01\uff1f\u2026]/

const fence = /^ {0,3}(`{3,}|~{3,})/
const atxHeading = /^ {0,3}(#{1,6})(?:[ \t](.*))?$/
// A closing run of #s, and the spaces around it, are not part of the title.
const closingHashes = /(?:^|[ \t])#+[ \t]*$/
const setextUnderline = /^ {0,3}(=+|-+)[ \t]*$/

/** ATX and setext headings of a markdown text, outside fenced code. */
export const markdownHeadings = (text: string): Array<Heading> => {
  const headings: Array<Heading> = []
  let inFence: string | undefined
  let offset = 0
  let previous: { offset: number; line: string } | undefined
  for (const raw of text.split("\n")) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw
    const fenceMatch = fence.exec(line)
    if (inFence !== undefined) {
      if (fenceMatch && fenceMatch[1]![0] === inFence[0] && fenceMatch[1]!.length >= inFence.length) inFence = undefined
      previous = undefined
    } else if (fenceMatch) {
      inFence = fenceMatch[1]!
      previous = undefined
    } else {
      const atx = atxHeading.exec(line)
      const setext = setextUnderline.exec(line)
      if (atx) {
        headings.push({ offset, level: atx[1]!.length, title: (atx[2] ?? "").trim().replace(closingHashes, "").trim() })
        previous = undefined
      } else if (setext && previous !== undefined) {
        headings.push({ offset: previous.offset, level: setext[1]![0] === "=" ? 1 : 2, title: previous.line.trim() })
        previous = undefined
      } else {
        previous = line.trim() === "" ? undefined : { offset, line }
      }
    }
    offset += raw.length + 1
  }
  return headings
}

/**
 * Counts tokens of any range of one text, exactly as `countTokens` would count
 * that slice, from cached counts of the pieces between cut points.
 */
const tableBits = 16
const tableMask = (1 << tableBits) - 1
const offsetBasis = 0x811c9dc5 | 0
const fnvPrime = 0x01000193

class RangeCounter {
  private readonly cache = new Map<string, number>()
  // Counts of short pieces by hash, open addressing; an entry points at an
  // earlier occurrence of its piece in the text, so a hit allocates nothing.
  // Four fields per slot: hash, start, length (0 for a free slot), tokens.
  private readonly table = new Int32Array(4 << tableBits)
  private tableUsed = 0
  readonly cuts: Int32Array
  private readonly prefix: Float64Array
  private readonly text: string

  constructor(text: string) {
    this.text = text
    let cuts = new Int32Array(Math.max(16, text.length >>> 2))
    let prefix = new Float64Array(cuts.length)
    let size = 1
    // Cuts inside a run of non-space characters are kept only when the run is
    // shorter than the run length at which countTokens starts cutting runs
    // itself; longer runs are counted whole.
    let runStart = 0
    let runCuts = 0
    let previous = spaceClass
    let hash = offsetBasis
    const length = text.length
    for (let i = 0; i <= length; i++) {
      // The end counts as a space, closing the last run.
      const code = i === length ? 0x20 : text.charCodeAt(i)
      let kind = charClasses[code]!
      if (kind === 0) kind = classify(code)
      let cut = false
      if (kind === spaceClass) {
        if (previous !== spaceClass) {
          if (i - runStart >= maxRunChars) size -= runCuts
          // The pre-tokenizer lets punctuation swallow following line breaks, never other spaces.
          cut = i === length || (code !== 0x0a && code !== 0x0d) || previous === letterClass
        }
        runCuts = 0
      } else if (previous === spaceClass) {
        runStart = i
      } else if (previous === letterClass && kind === otherClass && code !== 0x27) {
        // A letter's piece ends before anything but letters, marks and an apostrophe (of "'s", "'ll"...).
        cut = true
        runCuts++
      }
      if (i === length && i > cuts[size - 1]!) cut = true
      if (cut) {
        if (size === cuts.length) {
          const moreCuts = new Int32Array(cuts.length * 2)
          moreCuts.set(cuts)
          cuts = moreCuts
          const morePrefix = new Float64Array(cuts.length)
          morePrefix.set(prefix)
          prefix = morePrefix
        }
        cuts[size] = i
        prefix[size] = prefix[size - 1]! + this.pieceByHash(hash, cuts[size - 1]!, i)
        size++
        hash = offsetBasis
      }
      hash = Math.imul(hash ^ code, fnvPrime)
      previous = kind
    }
    this.cuts = cuts.slice(0, size)
    this.prefix = prefix.slice(0, size)
  }

  /** Tokens of [start, end), whose FNV-1a hash is `hash` when the piece is short. */
  private pieceByHash(hash: number, start: number, end: number): number {
    const length = end - start
    if (length > 48) return countTokens(this.text.slice(start, end))
    const table = this.table
    const text = this.text
    let slot = (hash & tableMask) << 2
    while (true) {
      const known = table[slot + 2]!
      if (known === 0) break
      if (known === length && table[slot] === hash) {
        const other = table[slot + 1]!
        let k = 0
        while (k < length && text.charCodeAt(other + k) === text.charCodeAt(start + k)) k++
        if (k === length) return table[slot + 3]!
      }
      slot = (slot + 4) & ((4 << tableBits) - 1)
    }
    const tokens = countTokens(text.slice(start, end))
    // Half full at most, so probes stay short; later pieces are counted without caching.
    if (this.tableUsed < tableMask >>> 1) {
      this.tableUsed++
      table[slot] = hash
      table[slot + 1] = start
      table[slot + 2] = length
      table[slot + 3] = tokens
    }
    return tokens
  }

  private piece(start: number, end: number): number {
    if (end <= start) return 0
    const slice = this.text.slice(start, end)
    if (slice.length > 48) return countTokens(slice)
    let tokens = this.cache.get(slice)
    if (tokens === undefined) {
      tokens = countTokens(slice)
      if (this.cache.size > 200_000) this.cache.clear()
      this.cache.set(slice, tokens)
    }
    return tokens
  }

  /** Index of the first cut at or after `position`. */
  firstCutFrom(position: number): number {
    let lo = 0
    let hi = this.cuts.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.cuts[mid]! < position) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  count(start: number, end: number): number {
    if (end <= start) return 0
    const lo = this.firstCutFrom(start)
    const hi = this.firstCutFrom(end + 1) - 1
    if (lo > hi) return this.piece(start, end)
    if (lo === hi) return this.piece(start, this.cuts[lo]!) + this.piece(this.cuts[lo]!, end)
    return this.piece(start, this.cuts[lo]!) + this.prefix[hi]! - this.prefix[lo]! + this.piece(this.cuts[hi]!, end)
  }
}

interface Unit {
  readonly start: number
  readonly end: number
  readonly tokens: number
}

interface Span {
  readonly start: number
  readonly end: number
  readonly tokens: number
}

class Splitter {
  private readonly counter: RangeCounter
  private readonly size: number
  private readonly overlap: number

  private readonly text: string

  constructor(text: string, chunking: Chunking) {
    this.text = text
    this.counter = new RangeCounter(text)
    this.size = chunking.chunkSize
    this.overlap = chunking.chunkOverlap
  }

  /** Chunks of the range [start, end), packed from units of the given levels, finest last. */
  section(start: number, end: number, levels: ReadonlyArray<Level>): Array<Span> {
    const units: Array<Unit> = []
    this.units(start, end, levels, 0, units)
    return this.pack(units)
  }

  private units(start: number, end: number, levels: ReadonlyArray<Level>, depth: number, out: Array<Unit>): void {
    if (end <= start) return
    // No token covers more than maxRunChars characters, so a longer range is
    // surely over the bound: not worth counting.
    const tokens = end - start > maxRunChars * this.size ? Infinity : this.counter.count(start, end)
    if (tokens <= this.size) {
      out.push({ start, end, tokens })
      return
    }
    const level = levels[depth]!
    if (level === "char") {
      for (const span of this.hardCut(start, end)) out.push(span)
      return
    }
    const cuts = this.boundaries(level, start, end)
    let from = start
    for (const cut of cuts) {
      this.units(from, cut, levels, depth + 1, out)
      from = cut
    }
    this.units(from, end, levels, depth + 1, out)
  }

  /** Positions strictly inside (start, end) where units of this level begin. */
  private boundaries(level: Exclude<Level, "char">, start: number, end: number): Array<number> {
    const positions: Array<number> = []
    if (level === "paragraph") {
      // Searched in the range alone, so a text without blank lines is not rescanned to its end.
      const range = this.text.slice(start, end)
      paragraphBreak.lastIndex = 0
      for (let match = paragraphBreak.exec(range); match !== null; match = paragraphBreak.exec(range)) {
        const at = match.index + match[0].length
        if (at >= range.length) break
        if (at > 0) positions.push(start + at)
      }
      return positions
    }
    const segmenter = level === "sentence" ? sentences : words
    for (const segment of segmenter.segment(this.text.slice(start, end))) {
      if (segment.index > 0) positions.push(start + segment.index)
    }
    return positions
  }

  /** Cuts [start, end) into the longest pieces within the bound, at code point boundaries. */
  private hardCut(start: number, end: number): Array<Span> {
    return this.oneRun(start, end) ? this.cutRun(start, end) : this.cutMixed(start, end)
  }

  private oneRun(start: number, end: number): boolean {
    for (let i = start; i < end; i++) if (isSpace(this.text.charCodeAt(i))) return false
    return true
  }

  /**
   * Cuts a run without spaces. countTokens counts such a run of a slice in
   * blocks of maxRunChars from the slice's start, so a piece's count grows
   * block by block and each block is counted once; only the last block is
   * bisected.
   */
  private cutRun(start: number, end: number): Array<Span> {
    const spans: Array<Span> = []
    const counter = this.counter
    let from = start
    while (from < end) {
      let tokens = 0
      let at = from
      while (at < end) {
        let blockEnd = Math.min(at + maxRunChars, end)
        if (blockEnd < end && isHighSurrogate(this.text.charCodeAt(blockEnd - 1))) blockEnd--
        const block = counter.count(at, blockEnd)
        if (tokens + block <= this.size) {
          tokens += block
          at = blockEnd
          continue
        }
        // The piece ends inside this block: the longest prefix of it that fits.
        let good = at
        let bad = blockEnd
        while (bad - good > 1) {
          let mid = (good + bad) >>> 1
          if (isHighSurrogate(this.text.charCodeAt(mid - 1)) && mid - 1 > good) mid--
          if (tokens + counter.count(at, mid) <= this.size) good = mid
          else bad = mid
          if (isHighSurrogate(this.text.charCodeAt(good - 1)) && good - 1 === at) break
        }
        if (good > at && good < end && isHighSurrogate(this.text.charCodeAt(good - 1))) good--
        tokens += counter.count(at, good)
        at = good
        break
      }
      // One code point is at most 4 tokens, below any allowed size.
      if (at === from) {
        at = Math.min(end, from + (isHighSurrogate(this.text.charCodeAt(from)) ? 2 : 1))
        tokens = counter.count(from, at)
      }
      spans.push({ start: from, end: at, tokens })
      from = at
    }
    return spans
  }

  private cutMixed(start: number, end: number): Array<Span> {
    const spans: Array<Span> = []
    const counter = this.counter
    // Characters per token, to guess where each piece ends; refined as pieces are cut.
    let ratio = (end - start) / Math.max(1, counter.count(start, end))
    let from = start
    while (from < end) {
      // Gallop from the guess until a probe overflows, then bisect; probes stay near one piece long.
      let good = from
      let bad = end + 1
      let probe = Math.min(end, from + Math.max(1, Math.floor(this.size * ratio)))
      while (bad - good > 1) {
        if (counter.count(from, probe) <= this.size) good = probe
        else bad = probe
        if (good === end) break
        probe = bad === end + 1 ? Math.min(end, good + Math.max(1, good - from)) : (good + bad) >>> 1
      }
      // Never split a surrogate pair.
      while (good > from && good < end && isHighSurrogate(this.text.charCodeAt(good - 1))) good--
      while (good > from && counter.count(from, good) > this.size) good--
      // One code point is at most 4 tokens, below any allowed size.
      if (good === from) good = Math.min(end, from + (isHighSurrogate(this.text.charCodeAt(from)) ? 2 : 1))
      const tokens = counter.count(from, good)
      spans.push({ start: from, end: good, tokens })
      ratio = Math.max(ratio / 4, (good - from) / Math.max(1, tokens))
      from = good
    }
    return spans
  }

  private trim(start: number, end: number): [number, number] {
    while (start < end && isSpace(this.text.charCodeAt(start))) start++
    while (end > start && isSpace(this.text.charCodeAt(end - 1))) end--
    return [start, end]
  }

  /** The first position in (from, end) that follows a sentence terminator, or `end`. */
  private nextSentenceStart(from: number, end: number): number {
    for (let i = from; i < end - 1; i++) {
      const code = this.text.charCodeAt(i)
      // Full-width terminators end a sentence without a following space.
      if (code === 0x3002 || code === 0xff01 || code === 0xff1f) return this.trim(i + 1, end)[0]
      if (
        (code === 0x2e || code === 0x21 || code === 0x3f || code === 0x2026) &&
        isSpace(this.text.charCodeAt(i + 1))
      ) {
        return this.trim(i + 1, end)[0]
      }
    }
    return end
  }

  private startsSentence(at: number): boolean {
    let i = at - 1
    while (i >= 0 && isSpace(this.text.charCodeAt(i))) i--
    return i < 0 || sentenceEnd.test(this.text[i]!)
  }

  private pack(units: ReadonlyArray<Unit>): Array<Span> {
    const spans: Array<Span> = []
    let carry = -1
    let i = 0
    while (i < units.length) {
      let start = carry >= 0 ? carry : units[i]!.start
      let estimate = (carry >= 0 ? this.counter.count(carry, units[i]!.start) : 0) + units[i]!.tokens
      if (estimate > this.size) {
        start = units[i]!.start
        estimate = units[i]!.tokens
      }
      let j = i
      while (j + 1 < units.length && estimate + units[j + 1]!.tokens <= this.size) estimate += units[++j]!.tokens
      // The estimate adds unit counts; the bound holds on the exact count of the trimmed text.
      let chunk: Span | undefined
      let pieces: Array<Span> | undefined
      while (true) {
        const [from, to] = this.trim(start, units[j]!.end)
        if (from >= to) break
        const tokens = this.counter.count(from, to)
        if (tokens <= this.size) {
          chunk = { start: from, end: to, tokens }
          break
        }
        if (j > i) {
          // Drop about as many units as the count is over, then count again.
          let excess = tokens - this.size
          while (j > i && excess > 0) excess -= units[j--]!.tokens
        } else if (start !== units[i]!.start) start = units[i]!.start
        else {
          pieces = this.hardCut(from, to)
          break
        }
      }
      if (pieces !== undefined) {
        for (const piece of pieces) spans.push(piece)
        carry = -1
      } else if (chunk !== undefined && (spans.length === 0 || chunk.end > spans[spans.length - 1]!.end)) {
        // (A chunk of overlap and whitespace alone adds nothing and is left out.)
        spans.push(chunk)
        carry = this.overlapStart(chunk.start, chunk.end)
      }
      i = j + 1
    }
    return spans
  }

  /**
   * Where the next chunk starts so that it repeats the end of [start, end):
   * the longest tail within the overlap bound, from a sentence start when that
   * keeps at least half the overlap, else from a word start; -1 for none.
   */
  private overlapStart(start: number, end: number): number {
    if (this.overlap === 0) return -1
    const counter = this.counter
    let best = -1
    // Word starts between spaces, found in the cut table by bisection.
    let lo = counter.firstCutFrom(start + 1)
    let hi = counter.firstCutFrom(end) - 1
    if (lo <= hi) {
      while (lo < hi) {
        const mid = (lo + hi) >>> 1
        if (counter.count(counter.cuts[mid]!, end) <= this.overlap) hi = mid
        else lo = mid + 1
      }
      for (let k = lo; k < counter.cuts.length && counter.cuts[k]! < end; k++) {
        const [from] = this.trim(counter.cuts[k]!, end)
        if (from < end && counter.count(from, end) <= this.overlap) {
          best = from
          break
        }
      }
    }
    // No space-separated words (CJK, Thai) or too short a tail: word starts from the segmenter.
    if (best < 0 || counter.count(best, end) < this.overlap / 2) {
      // A window a little longer than the overlap at this chunk's characters per token.
      const perToken = (end - start) / Math.max(1, counter.count(start, end))
      let windowStart = Math.max(start + 1, end - Math.ceil(this.overlap * perToken * 1.5) - 8)
      if (isLowSurrogate(this.text.charCodeAt(windowStart))) windowStart++
      // Sentence starts first (a cheap scan for terminators), the segmenter's word starts when they are too few.
      let starts: Array<number> = []
      for (let at = this.nextSentenceStart(windowStart, end); at < end; at = this.nextSentenceStart(at, end)) {
        starts.push(at)
      }
      const sentenceAt = starts.find((at) => counter.count(at, end) <= this.overlap)
      if (sentenceAt === undefined || counter.count(sentenceAt, end) * 2 < this.overlap) {
        starts = []
        for (const segment of words.segment(this.text.slice(windowStart, end))) {
          const at = windowStart + segment.index
          if (segment.index > 0 && !isSpace(this.text.charCodeAt(at))) starts.push(at)
        }
      }
      let a = 0
      let b = starts.length
      while (a < b) {
        const mid = (a + b) >>> 1
        if (counter.count(starts[mid]!, end) <= this.overlap) b = mid
        else a = mid + 1
      }
      if (a < starts.length && (best < 0 || starts[a]! < best)) best = starts[a]!
    }
    if (best < 0 || this.startsSentence(best)) return best
    // Prefer the first sentence start in the tail when it keeps at least half
    // the overlap. This runs once per chunk on a short tail, where a scan for
    // terminators costs a fraction of a segmenter's set-up.
    const at = this.nextSentenceStart(best, end)
    return at < end && counter.count(at, end) * 2 >= this.overlap ? at : best
  }
}

const levelsOf = (strategy: Exclude<ChunkingStrategy, "auto">): ReadonlyArray<Level> =>
  strategy === "sentence" ? ["sentence", "word", "char"] : ["paragraph", "sentence", "word", "char"]

interface Section {
  readonly start: number
  readonly end: number
  readonly headingPath: ReadonlyArray<string>
}

const sectionsOf = (length: number, headings: ReadonlyArray<Heading>): Array<Section> => {
  const sorted = [...headings].filter((h) => h.offset >= 0 && h.offset < length).sort((a, b) => a.offset - b.offset)
  const sections: Array<Section> = []
  const stack: Array<Heading> = []
  let start = 0
  let path: ReadonlyArray<string> = []
  for (const heading of sorted) {
    if (heading.offset > start) sections.push({ start, end: heading.offset, headingPath: path })
    while (stack.length > 0 && stack[stack.length - 1]!.level >= heading.level) stack.pop()
    stack.push(heading)
    path = stack.map((h) => h.title)
    start = heading.offset
  }
  if (length > start) sections.push({ start, end: length, headingPath: path })
  return sections
}

const pageAt = (pages: ReadonlyArray<number>, offset: number) => {
  let lo = 0
  let hi = pages.length - 1
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1
    if (pages[mid]! <= offset) lo = mid
    else hi = mid - 1
  }
  return lo + 1
}

/**
 * Splits a document's text into chunks. The settings must be valid (see
 * `validateChunking`). Every chunk holds at most `chunkSize` tokens; its
 * content is `text.slice(startOffset, endOffset)`; chunks come in document
 * order and together hold every non-space character; consecutive chunks of a
 * section share at most `chunkOverlap` tokens. Markdown chunks never span two
 * sections.
 */
export const split = (input: SplitInput, chunking: Chunking): Array<Chunk> => {
  const text = input.text
  const strategy = resolveStrategy(chunking.strategy, input.kind)
  const splitter = new Splitter(text, chunking)
  const sections =
    strategy === "markdown"
      ? sectionsOf(text.length, input.headings ?? markdownHeadings(text))
      : [{ start: 0, end: text.length, headingPath: [] }]
  const levels = levelsOf(strategy)
  const pages = input.pages !== undefined && input.pages.length > 0 ? input.pages : undefined
  const chunks: Array<Chunk> = []
  for (const section of sections) {
    for (const span of splitter.section(section.start, section.end, levels)) {
      const chunk: Chunk = {
        index: chunks.length,
        content: text.slice(span.start, span.end),
        tokenCount: span.tokens,
        startOffset: span.start,
        endOffset: span.end,
        headingPath: section.headingPath,
        ...(pages ? { page: pageAt(pages, span.start) } : {})
      }
      chunks.push(chunk)
    }
  }
  return chunks
}

/** `split` after validating the settings, as a traced effect. */
export const chunkText = Traced.fn("Knowledge.chunk")(function* (input: SplitInput, settings: ChunkingInput) {
  const chunking = yield* validateChunking(settings)
  return split(input, chunking)
})
