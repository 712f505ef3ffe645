import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { type DocumentKind, type Heading, markdownHeadings } from "./Splitter.ts"
import * as Traced from "../Observability/Traced.ts"
import { checkArchive, defaultZipLimits, type ZipLimits } from "./Zip.ts"

/**
 * Text extraction: bytes of an uploaded file in, the text the splitter chunks
 * out, with the structure worth keeping (headings, page starts). The kind is
 * detected from the content first (PDF and DOCX by their magic bytes) and from
 * the declared content type or file name otherwise.
 */

export interface ExtractInput {
  readonly bytes: Uint8Array
  readonly contentType?: string | undefined
  readonly filename?: string | undefined
}

export interface ExtractOptions {
  /** Larger inputs fail with `too_large` before any parsing. */
  readonly maxBytes: number
  /** PDFs with more pages fail with `too_large`. */
  readonly maxPages: number
  /** Extracted text longer than this fails with `too_large`. */
  readonly maxChars: number
  /** Parsing that takes longer fails with `parse_error`. */
  readonly timeout: Duration.Input
  /** Bounds on a DOCX's zip entries, checked before it is opened. */
  readonly zip?: ZipLimits | undefined
}

export const defaultExtractOptions: ExtractOptions = {
  maxBytes: 25 * 1024 * 1024,
  maxPages: 2_000,
  maxChars: 5_000_000,
  timeout: "60 seconds"
}

export interface ExtractedDocument {
  readonly kind: DocumentKind
  /** The canonical content type of the kind, e.g. `text/markdown`. */
  readonly contentType: string
  /** Chunk offsets refer to this text. Line breaks are `\n`. */
  readonly text: string
  readonly headings: ReadonlyArray<Heading>
  /** Offset where each page starts, for PDFs. */
  readonly pages?: ReadonlyArray<number>
}

export class UnsupportedType extends Data.TaggedError("UnsupportedType")<{ readonly message: string }> {
  readonly code = "unsupported_type"
}
export class ParseError extends Data.TaggedError("ParseError")<{ readonly message: string }> {
  readonly code = "parse_error"
}
export class NoText extends Data.TaggedError("NoText")<{ readonly message: string }> {
  readonly code = "no_text"
}
export class TooLarge extends Data.TaggedError("TooLarge")<{ readonly message: string }> {
  readonly code = "too_large"
}
export type ExtractError = UnsupportedType | ParseError | NoText | TooLarge
/** The code a failed document records. */
export type ExtractErrorCode = ExtractError["code"]

export const contentTypes: Record<DocumentKind, string> = {
  text: "text/plain",
  markdown: "text/markdown",
  html: "text/html",
  json: "application/json",
  csv: "text/csv",
  pdf: "application/pdf",
  docx: "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
}

const byMediaType: Record<string, DocumentKind> = {
  "text/plain": "text",
  "text/markdown": "markdown",
  "text/x-markdown": "markdown",
  "text/html": "html",
  "application/xhtml+xml": "html",
  "application/json": "json",
  "text/json": "json",
  "text/csv": "csv",
  "application/csv": "csv",
  "application/pdf": "pdf",
  [contentTypes.docx]: "docx"
}

const byExtension: Record<string, DocumentKind> = {
  txt: "text",
  text: "text",
  log: "text",
  md: "markdown",
  markdown: "markdown",
  html: "html",
  htm: "html",
  xhtml: "html",
  json: "json",
  csv: "csv",
  pdf: "pdf",
  docx: "docx"
}

const startsWith = (bytes: Uint8Array, prefix: ReadonlyArray<number>, at = 0) =>
  prefix.every((byte, i) => bytes[at + i] === byte)

const ascii = (text: string) => Array.from(text, (char) => char.charCodeAt(0))
const pdfMagic = ascii("%PDF-")
const zipMagic = [0x50, 0x4b, 0x03, 0x04]
const wordDocument = Buffer.from("word/document.xml")

// The format allows some bytes before the header; those are trusted only from a declared PDF.
const isPdf = (bytes: Uint8Array, declared: DocumentKind | "unknown" | "other") =>
  startsWith(bytes, pdfMagic) ||
  (declared === "pdf" &&
    Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.length, 1024)).indexOf("%PDF-") >= 0)
const isZip = (bytes: Uint8Array) => startsWith(bytes, zipMagic)
// Zip entry names are stored uncompressed, in the local headers and the central directory.
const isDocx = (bytes: Uint8Array) =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).indexOf(wordDocument) >= 0

const declaredKind = (input: ExtractInput): DocumentKind | "unknown" | "other" => {
  const mediaType = (input.contentType ?? "").split(";")[0]!.trim().toLowerCase()
  if (mediaType && mediaType !== "application/octet-stream") {
    const kind = byMediaType[mediaType]
    if (kind !== undefined) return kind
    if (mediaType.startsWith("text/")) return "text"
    return "other"
  }
  const extension = input.filename?.toLowerCase().match(/\.([a-z0-9]+)$/)?.[1]
  if (extension !== undefined) return byExtension[extension] ?? "other"
  return "unknown"
}

/** Text of bytes that are text: UTF-8 (or UTF-16 with a byte order mark) without NUL characters. */
const decodeText = (bytes: Uint8Array): string | undefined => {
  let text: string
  try {
    if (startsWith(bytes, [0xff, 0xfe])) text = new TextDecoder("utf-16le", { fatal: true }).decode(bytes.subarray(2))
    else if (startsWith(bytes, [0xfe, 0xff]))
      text = new TextDecoder("utf-16be", { fatal: true }).decode(bytes.subarray(2))
    else text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes)
  } catch {
    return undefined
  }
  if (text.includes("\u0000")) return undefined
  return text.replace(/\r\n?/g, "\n")
}

const sniffText = (text: string): DocumentKind => {
  const head = text.trimStart().slice(0, 256).toLowerCase()
  if (head.startsWith("<!doctype html") || head.startsWith("<html")) return "html"
  if (head.startsWith("{") || head.startsWith("[")) {
    try {
      JSON.parse(text)
      return "json"
    } catch {
      return "text"
    }
  }
  if (/^ {0,3}#{1,6} \S/m.test(text.slice(0, 4096))) return "markdown"
  return "text"
}

// ---------------------------------------------------------------------------
// HTML: a small tolerant scanner. Scripts, styles and other non-content
// elements are dropped; block elements become paragraph breaks; h1..h6 become
// headings of the extracted text.

const entities: Record<string, string> = {
  amp: "&",
  lt: "<",
  gt: ">",
  quot: '"',
  apos: "'",
  nbsp: "\u00a0",
  ndash: "\u2013",
  mdash: "\u2014",
  hellip: "\u2026",
  lsquo: "\u2018",
  rsquo: "\u2019",
  ldquo: "\u201c",
  rdquo: "\u201d",
  copy: "\u00a9",
  reg: "\u00ae",
  trade: "\u2122",
  euro: "\u20ac",
  laquo: "\u00ab",
  raquo: "\u00bb",
  middot: "\u00b7",
  bull: "\u2022"
}
const decodeEntities = (text: string) =>
  text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z][a-z0-9]*);/gi, (whole, name: string) => {
    if (name[0] === "#") {
      const code = name[1] === "x" || name[1] === "X" ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10)
      return Number.isFinite(code) && code > 0 && code <= 0x10ffff && (code < 0xd800 || code > 0xdfff)
        ? String.fromCodePoint(code)
        : whole
    }
    return entities[name.toLowerCase()] ?? whole
  })

const skipped = new Set(["script", "style", "noscript", "template", "svg", "head", "iframe", "object", "canvas"])
const blocks = new Set([
  "p",
  "div",
  "section",
  "article",
  "header",
  "footer",
  "main",
  "nav",
  "aside",
  "ul",
  "ol",
  "li",
  "dl",
  "dt",
  "dd",
  "table",
  "thead",
  "tbody",
  "tfoot",
  "tr",
  "blockquote",
  "pre",
  "figure",
  "figcaption",
  "form",
  "fieldset",
  "hr",
  "address",
  "details",
  "summary",
  "body",
  "html",
  "title",
  "caption"
])

const trailingSpaceStart = (text: string) => {
  let end = text.length
  while (end > 0 && (text[end - 1] === " " || text[end - 1] === "\t")) end--
  return end
}

/** Text and headings of an HTML document. */
export const htmlToText = (html: string): { text: string; headings: Array<Heading> } => {
  // The output is kept in parts, with its last two characters at hand: reading
  // the end of a string built by `+=` would flatten it again and again.
  const parts: Array<string> = []
  let length = 0
  let last = ""
  let beforeLast = ""
  const recomputeTail = () => {
    const tail = (parts.length > 1 ? parts[parts.length - 2]! : "") + (parts.length > 0 ? parts[parts.length - 1]! : "")
    last = tail.length > 0 ? tail[tail.length - 1]! : ""
    beforeLast = tail.length > 1 ? tail[tail.length - 2]! : ""
  }
  const append = (text: string) => {
    if (text === "") return
    parts.push(text)
    length += text.length
    beforeLast = text.length > 1 ? text[text.length - 2]! : last
    last = text[text.length - 1]!
  }
  // Drops trailing spaces and tabs, or all trailing whitespace.
  const trimTrailing = (all: boolean) => {
    while (parts.length > 0) {
      const part = parts[parts.length - 1]!
      const trimmed = all ? part.trimEnd() : part.slice(0, trailingSpaceStart(part))
      length -= part.length - trimmed.length
      if (trimmed === "") parts.pop()
      else {
        parts[parts.length - 1] = trimmed
        break
      }
    }
    recomputeTail()
  }
  const headings: Array<Heading> = []
  let heading: { level: number; offset: number; part: number } | undefined
  let pre = 0
  const breakBlock = () => {
    if (last === " " || last === "\t") trimTrailing(false)
    if (length > 0 && !(last === "\n" && beforeLast === "\n")) append(last === "\n" ? "\n" : "\n\n")
  }
  const addText = (raw: string) => {
    let text = raw
    if (pre === 0) {
      // HTML's own whitespace collapses; an encoded no-break space stays.
      text = text.replace(/[ \t\n\r\f]+/g, " ")
      if (length === 0 || last === "\n" || last === " ") text = text.replace(/^ /, "")
    }
    append(decodeEntities(text))
  }
  // A hand-written scan rather than one regular expression, so that hostile
  // markup (unclosed quotes, "<" without ">") stays linear: the next ">" is
  // looked up once and reused, and a tag ends at it, quotes or not.
  let nextClose = -1
  const closeAfter = (position: number) => {
    if (nextClose !== Infinity && nextClose < position) {
      const found = html.indexOf(">", position)
      nextClose = found < 0 ? Infinity : found
    }
    return nextClose
  }
  const tagName = /[a-zA-Z][a-zA-Z0-9-]*/y
  let at = 0
  let open = html.indexOf("<")
  while (open >= 0) {
    let end: number
    let name: string | undefined
    let closing = false
    if (html.startsWith("<!--", open)) {
      const close = html.indexOf("-->", open + 4)
      end = close < 0 ? html.length : close + 3
    } else if (html[open + 1] === "!" || html[open + 1] === "?") {
      const close = closeAfter(open)
      end = close === Infinity ? html.length : close + 1
    } else {
      closing = html[open + 1] === "/"
      tagName.lastIndex = open + (closing ? 2 : 1)
      const match = tagName.exec(html)
      const close = closeAfter(open)
      if (match === null || close === Infinity || close - open > 8192) {
        // Not a tag: the "<" is text.
        open = html.indexOf("<", open + 1)
        continue
      }
      name = match[0].toLowerCase()
      end = close + 1
    }
    if (open > at) addText(html.slice(at, open))
    at = end
    if (name !== undefined) {
      const selfClosing = html[end - 2] === "/"
      if (!closing && skipped.has(name) && !selfClosing) {
        // Everything up to the matching end tag is dropped.
        const endTag = new RegExp(`</${name}(?=[\\s/>])`, "gi")
        endTag.lastIndex = at
        const found = endTag.exec(html)
        const close = found === null ? Infinity : closeAfter(found.index)
        at = close === Infinity ? html.length : close + 1
      } else {
        const level = /^h([1-6])$/.exec(name)
        if (level) {
          breakBlock()
          if (!closing) heading = { level: Number(level[1]), offset: length, part: parts.length }
          else if (heading !== undefined) {
            const title = parts.slice(heading.part).join("").trim()
            if (title !== "") headings.push({ offset: heading.offset, level: heading.level, title })
            heading = undefined
          }
        } else if (name === "br") append("\n")
        else if (name === "td" || name === "th") {
          if (!closing && last !== "\n" && length > 0) append("\t")
        } else if (blocks.has(name)) {
          breakBlock()
          if (name === "pre") pre = Math.max(0, pre + (closing ? -1 : 1))
        }
      }
    }
    open = html.indexOf("<", at)
  }
  if (at < html.length) addText(html.slice(at))
  // Headings are offsets into the text; only its end is trimmed.
  trimTrailing(true)
  return { text: parts.join(""), headings }
}

// ---------------------------------------------------------------------------

const loadPdf = () => import("unpdf")
const loadMammoth = () => import("mammoth").then((module) => (module.default ?? module) as typeof import("mammoth"))

const extractPdf = (bytes: Uint8Array, options: ExtractOptions) =>
  Effect.gen(function* () {
    const pdf = yield* Effect.tryPromise({
      try: async () => {
        const { getDocumentProxy } = await loadPdf()
        // pdf.js takes over (detaches) the buffer it is given.
        return getDocumentProxy(new Uint8Array(bytes), { verbosity: 0 })
      },
      catch: (cause) => new ParseError({ message: `The PDF could not be read: ${describe(cause)}` })
    })
    return yield* Effect.gen(function* () {
      if (pdf.numPages > options.maxPages) {
        return yield* new TooLarge({
          message: `The PDF has ${pdf.numPages} pages; at most ${options.maxPages} are accepted.`
        })
      }
      const pages: Array<number> = []
      let text = ""
      for (let number = 1; number <= pdf.numPages; number++) {
        const pageText = yield* Effect.tryPromise({
          try: async () => {
            const page = await pdf.getPage(number)
            const content = await page.getTextContent()
            let line = ""
            for (const item of content.items) {
              if (!("str" in item)) continue
              line += item.str
              if (item.hasEOL) line += "\n"
            }
            page.cleanup()
            return line
          },
          catch: (cause) =>
            new ParseError({ message: `Page ${number} of the PDF could not be read: ${describe(cause)}` })
        })
        const clean = pageText
          .replace(/\r\n?/g, "\n")
          .split("\n")
          .map((line) => line.trimEnd())
          .join("\n")
          .trim()
        if (text.length > 0) text += "\n\n"
        pages.push(text.length)
        text += clean
        if (text.length > options.maxChars) {
          return yield* new TooLarge({ message: `The PDF holds more than ${options.maxChars} characters of text.` })
        }
      }
      return { text, pages }
    }).pipe(Effect.ensuring(Effect.promise(() => pdf.loadingTask.destroy().catch(() => undefined))))
  })

const extractDocx = (bytes: Uint8Array) =>
  Effect.tryPromise({
    try: async () => {
      const mammoth = await loadMammoth()
      const result = await mammoth.convertToHtml({ buffer: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length) })
      return htmlToText(result.value)
    },
    catch: (cause) => new ParseError({ message: `The DOCX document could not be read: ${describe(cause)}` })
  })

const describe = (cause: unknown) =>
  (cause instanceof Error ? cause.message : String(cause)).split("\n")[0]!.slice(0, 200)

const fromText = (
  kind: DocumentKind,
  text: string
): Effect.Effect<Omit<ExtractedDocument, "contentType">, ParseError> => {
  switch (kind) {
    case "markdown":
      return Effect.succeed({ kind, text, headings: markdownHeadings(text) })
    case "html": {
      const { headings, text: body } = htmlToText(text)
      return Effect.succeed({ kind, text: body, headings })
    }
    case "json":
      return Effect.try({
        try: () => {
          JSON.parse(text)
          return { kind, text, headings: [] }
        },
        catch: (cause) => new ParseError({ message: `The JSON document is not valid: ${describe(cause)}` })
      })
    default:
      return Effect.succeed({ kind, text, headings: [] })
  }
}

/**
 * The kind an upload will be read as, from its first bytes and its declared
 * type, without parsing it: what an upload answers 415 on before anything is
 * stored. Extraction may still find the file damaged or without text.
 */
export const detect = (input: ExtractInput): DocumentKind | UnsupportedType => {
  const bytes = input.bytes
  const declared = declaredKind(input)
  if (isPdf(bytes, declared)) return "pdf"
  if (isZip(bytes)) {
    return isDocx(bytes)
      ? "docx"
      : new UnsupportedType({ message: "The archive is not a DOCX document; only DOCX is read among zip formats." })
  }
  if (declared === "pdf" || declared === "docx") return declared
  if (declared === "other") {
    return new UnsupportedType({
      message: `The type ${input.contentType ?? input.filename ?? "given"} is not supported: send plain text, Markdown, HTML, JSON, CSV, PDF or DOCX.`
    })
  }
  const text = decodeText(bytes)
  if (text === undefined) {
    return new UnsupportedType({
      message: "The file is binary and of no supported type: send plain text, Markdown, HTML, JSON, CSV, PDF or DOCX."
    })
  }
  return declared === "unknown" ? sniffText(text) : declared
}

/**
 * Extracts the text of an uploaded file. Fails with `UnsupportedType` for
 * anything but plain text, Markdown, HTML, JSON, CSV, PDF and DOCX, `ParseError`
 * for a damaged file or one that takes longer than the timeout, `TooLarge`
 * beyond the byte, page or character limits and `NoText` when nothing but
 * whitespace is left (an empty file, a scanned PDF without a text layer).
 */
export const extract = Traced.fn("Knowledge.extract")(function* (input: ExtractInput, options: ExtractOptions) {
  const bytes = input.bytes
  if (bytes.length > options.maxBytes) {
    return yield* new TooLarge({
      message: `The file has ${bytes.length} bytes; at most ${options.maxBytes} are accepted.`
    })
  }
  const declared = declaredKind(input)
  const work: Effect.Effect<Omit<ExtractedDocument, "contentType">, ExtractError> = Effect.gen(function* () {
    if (isPdf(bytes, declared)) {
      const { pages, text } = yield* extractPdf(bytes, options)
      return { kind: "pdf" as const, text, headings: [], pages }
    }
    if (isZip(bytes)) {
      if (!isDocx(bytes)) {
        return yield* new UnsupportedType({
          message: "The archive is not a DOCX document; only DOCX is read among zip formats."
        })
      }
      // Before any parser opens the archive: a zip bomb is refused from its directory and its capped inflation.
      const problem = checkArchive(bytes, options.zip ?? defaultZipLimits)
      if (problem !== undefined) {
        return yield* problem.kind === "too_large"
          ? new TooLarge({ message: problem.message })
          : new ParseError({ message: problem.message })
      }
      const { headings, text } = yield* extractDocx(bytes)
      return { kind: "docx" as const, text, headings }
    }
    if (declared === "pdf")
      return yield* new ParseError({ message: "The file is declared a PDF but has no PDF header." })
    if (declared === "docx")
      return yield* new ParseError({ message: "The file is declared a DOCX document but is not a zip archive." })
    if (declared === "other") {
      return yield* new UnsupportedType({
        message: `The type ${input.contentType ?? input.filename ?? "given"} is not supported: send plain text, Markdown, HTML, JSON, CSV, PDF or DOCX.`
      })
    }
    const text = decodeText(bytes)
    if (text === undefined) {
      return yield* new UnsupportedType({
        message: "The file is binary and of no supported type: send plain text, Markdown, HTML, JSON, CSV, PDF or DOCX."
      })
    }
    return yield* fromText(declared === "unknown" ? sniffText(text) : declared, text.replace(/^\uFEFF/, ""))
  })
  const document = yield* work.pipe(
    Effect.timeoutOrElse({
      duration: options.timeout,
      orElse: () =>
        Effect.fail(
          new ParseError({
            message: `Extraction took longer than ${Duration.format(Duration.fromInputUnsafe(options.timeout))}.`
          })
        )
    })
  )
  if (document.text.length > options.maxChars) {
    return yield* new TooLarge({ message: `The document holds more than ${options.maxChars} characters of text.` })
  }
  if (document.text.trim() === "") {
    return yield* new NoText({
      message:
        document.kind === "pdf"
          ? "The PDF has no text layer (a scan or images only); run OCR on it first."
          : "The document holds no text."
    })
  }
  return { ...document, contentType: contentTypes[document.kind] } satisfies ExtractedDocument
})
