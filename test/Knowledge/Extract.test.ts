import { assert, describe, it } from "@effect/vitest"
import { Document, HeadingLevel, Packer, Paragraph } from "docx"
import { Effect } from "effect"
import { PDFDocument, StandardFonts } from "pdf-lib"
import {
  defaultExtractOptions,
  extract,
  type ExtractInput,
  type ExtractOptions,
  htmlToText
} from "../../src/Knowledge/Extract.ts"
import { split } from "../../src/Knowledge/Splitter.ts"

const utf8 = (text: string) => new TextEncoder().encode(text)

const run = (input: ExtractInput, options: ExtractOptions = defaultExtractOptions) => extract(input, options)
const failure = (input: ExtractInput, options: ExtractOptions = defaultExtractOptions) =>
  Effect.flip(extract(input, options))

const twoPagePdf = Effect.promise(async () => {
  const pdf = await PDFDocument.create()
  const font = await pdf.embedFont(StandardFonts.Helvetica)
  const first = pdf.addPage([595, 842])
  first.drawText("Otters live in rivers.", { x: 50, y: 780, size: 14, font })
  first.drawText("They eat fish and shellfish.", { x: 50, y: 760, size: 14, font })
  const second = pdf.addPage([595, 842])
  second.drawText("Beavers build dams.", { x: 50, y: 780, size: 14, font })
  return pdf.save()
})

// A page with only a drawn image: what a scanner produces, no text layer.
const scannedPdf = Effect.promise(async () => {
  const pdf = await PDFDocument.create()
  const png = Uint8Array.from(
    Buffer.from(
      "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
      "base64"
    )
  )
  const image = await pdf.embedPng(png)
  pdf.addPage([595, 842]).drawImage(image, { x: 0, y: 0, width: 595, height: 842 })
  return pdf.save()
})

const docxWithHeadings = Effect.promise(() =>
  Packer.toBuffer(
    new Document({
      sections: [
        {
          children: [
            new Paragraph({ text: "Install", heading: HeadingLevel.HEADING_1 }),
            new Paragraph({ text: "Download the package first." }),
            new Paragraph({ text: "Linux", heading: HeadingLevel.HEADING_2 }),
            new Paragraph({ text: "Run the installer with apt." }),
            new Paragraph({ text: "Usage", heading: HeadingLevel.HEADING_1 }),
            new Paragraph({ text: "Start it & enjoy." })
          ]
        }
      ]
    })
  )
)

describe("Extract", () => {
  it.effect("reads a two-page PDF with its page starts", () =>
    Effect.gen(function* () {
      const bytes = yield* twoPagePdf
      const document = yield* run({ bytes, contentType: "application/pdf", filename: "animals.pdf" })
      assert.strictEqual(document.kind, "pdf")
      assert.strictEqual(document.contentType, "application/pdf")
      assert.include(document.text, "Otters live in rivers.")
      assert.include(document.text, "Beavers build dams.")
      assert.deepStrictEqual(document.pages, [0, document.text.indexOf("Beavers")])
      // Detected from the magic bytes, whatever the declared type.
      const undeclared = yield* run({ bytes, contentType: "application/octet-stream" })
      assert.strictEqual(undeclared.kind, "pdf")
      // Page numbers come through the splitter.
      const chunks = split(
        { text: document.text, pages: document.pages },
        { strategy: "auto", chunkSize: 64, chunkOverlap: 0 }
      )
      assert.strictEqual(chunks.length, 1)
      assert.strictEqual(chunks[0]!.page, 1)
      const paged = split(
        {
          text: document.text.replace("Beavers", `${"More otter facts. ".repeat(30)}\n\nBeavers`),
          pages: document.pages
        },
        { strategy: "auto", chunkSize: 64, chunkOverlap: 0 }
      )
      assert.strictEqual(paged[0]!.page, 1)
      assert.isTrue(paged.every((chunk) => chunk.page === 1 || chunk.page === 2))
    })
  )

  it.effect("fails a PDF over the page limit with too_large", () =>
    Effect.gen(function* () {
      const bytes = yield* twoPagePdf
      const error = yield* failure({ bytes, filename: "animals.pdf" }, { ...defaultExtractOptions, maxPages: 1 })
      assert.strictEqual(error._tag, "TooLarge")
      assert.strictEqual(error.code, "too_large")
      assert.include(error.message, "2 pages")
    })
  )

  it.effect("fails a PDF without a text layer with no_text", () =>
    Effect.gen(function* () {
      const bytes = yield* scannedPdf
      const error = yield* failure({ bytes, contentType: "application/pdf" })
      assert.strictEqual(error._tag, "NoText")
      assert.strictEqual(error.code, "no_text")
      assert.include(error.message, "no text layer")
    })
  )

  it.effect("fails a corrupt PDF with parse_error", () =>
    Effect.gen(function* () {
      const error = yield* failure({
        bytes: utf8("%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage"),
        filename: "broken.pdf"
      })
      assert.strictEqual(error._tag, "ParseError")
      assert.strictEqual(error.code, "parse_error")
      const truncated = (yield* twoPagePdf).slice(0, 300)
      assert.strictEqual((yield* failure({ bytes: truncated, contentType: "application/pdf" }))._tag, "ParseError")
      // Declared a PDF, but not one.
      assert.strictEqual((yield* failure({ bytes: utf8("hello"), contentType: "application/pdf" }))._tag, "ParseError")
    })
  )

  it.effect("reads a DOCX document with its headings", () =>
    Effect.gen(function* () {
      const bytes = yield* docxWithHeadings
      const document = yield* run({ bytes, filename: "guide.docx" })
      assert.strictEqual(document.kind, "docx")
      assert.strictEqual(
        document.text,
        "Install\n\nDownload the package first.\n\nLinux\n\nRun the installer with apt.\n\nUsage\n\nStart it & enjoy."
      )
      assert.deepStrictEqual(
        document.headings.map((h) => [h.level, h.title, document.text.startsWith(h.title, h.offset)]),
        [
          [1, "Install", true],
          [2, "Linux", true],
          [1, "Usage", true]
        ]
      )
      const chunks = split(document, { strategy: "auto", chunkSize: 64, chunkOverlap: 0 })
      assert.deepStrictEqual(
        chunks.map((chunk) => chunk.headingPath),
        [["Install"], ["Install", "Linux"], ["Usage"]]
      )
    })
  )

  it.effect("reads HTML without scripts and styles, with headings", () =>
    Effect.gen(function* () {
      const html = `<!DOCTYPE html><html><head><title>Ignored</title><style>body { color: red }</style>
        <script>alert("no")</script></head><body>
        <h1>Guide</h1><p>Hello&nbsp;&amp; welcome to   the <b>guide</b>.</p>
        <script type="text/javascript">var x = "<h2>fake</h2>";</script>
        <!-- a comment -->
        <h2 class="x">Install <em>it</em></h2><ul><li>One</li><li>Two &#x1F600;</li></ul>
        <noscript>enable js</noscript><table><tr><td>a</td><td>b</td></tr></table></body></html>`
      const document = yield* run({ bytes: utf8(html), contentType: "text/html; charset=utf-8" })
      assert.strictEqual(document.kind, "html")
      assert.strictEqual(
        document.text,
        "Guide\n\nHello\u00a0& welcome to the guide.\n\nInstall it\n\nOne\n\nTwo 😀\n\na\tb"
      )
      assert.notInclude(document.text, "alert")
      assert.notInclude(document.text, "color")
      assert.deepStrictEqual(document.headings, [
        { offset: 0, level: 1, title: "Guide" },
        { offset: document.text.indexOf("Install"), level: 2, title: "Install it" }
      ])
      const chunks = split(document, { strategy: "auto", chunkSize: 64, chunkOverlap: 0 })
      assert.deepStrictEqual(
        chunks.map((chunk) => chunk.headingPath),
        [["Guide"], ["Guide", "Install it"]]
      )
      // Sniffed without a declared type.
      assert.strictEqual((yield* run({ bytes: utf8(html) })).kind, "html")
    })
  )

  // Quadratic scanning of these would run for minutes, past the test's timeout; speed itself is the bench's business.
  it("reads hostile HTML", () => {
    for (const html of [
      '<a href="x '.repeat(50_000),
      "<!doctype ".repeat(50_000),
      "a < b ".repeat(100_000),
      "<p>x  </p> ".repeat(50_000)
    ]) {
      assert.isAtMost(htmlToText(html).text.length, html.length)
    }
    // A lone "<" is text; a tag ends at its first ">".
    assert.strictEqual(htmlToText("<p>x < y and y > z</p>").text, "x < y and y > z")
  })

  it.effect("reads Markdown, JSON, CSV and plain text", () =>
    Effect.gen(function* () {
      const markdown = yield* run({
        bytes: utf8("# Title\r\n\r\nBody text.\r\n\r\n## Part\r\n\r\nMore."),
        filename: "notes.md"
      })
      assert.strictEqual(markdown.kind, "markdown")
      assert.strictEqual(markdown.contentType, "text/markdown")
      assert.strictEqual(markdown.text, "# Title\n\nBody text.\n\n## Part\n\nMore.")
      assert.deepStrictEqual(
        markdown.headings.map((h) => h.title),
        ["Title", "Part"]
      )

      const json = yield* run({
        bytes: utf8(`{"name": "otter", "tags": ["river", "fish"]}`),
        contentType: "application/json"
      })
      assert.strictEqual(json.kind, "json")
      assert.include(json.text, "otter")
      const invalid = yield* failure({ bytes: utf8(`{"name": `), contentType: "application/json" })
      assert.strictEqual(invalid.code, "parse_error")

      const csv = yield* run({ bytes: utf8("name,habitat\notter,river\nbeaver,lake\n"), filename: "animals.csv" })
      assert.strictEqual(csv.kind, "csv")
      assert.strictEqual(csv.contentType, "text/csv")
      assert.include(csv.text, "beaver,lake")

      const text = yield* run({ bytes: utf8("\uFEFFJust some text. 我们今天去公园散步。"), contentType: "text/plain" })
      assert.strictEqual(text.kind, "text")
      assert.strictEqual(text.text, "Just some text. 我们今天去公园散步。")
      assert.deepStrictEqual(text.headings, [])
      assert.isUndefined(text.pages)

      const utf16 = yield* run({
        bytes: Uint8Array.from([0xff, 0xfe, ...Buffer.from("hi there", "utf16le")]),
        filename: "a.txt"
      })
      assert.strictEqual(utf16.text, "hi there")
    })
  )

  it.effect("fails unsupported types, empty files and oversized input with their codes", () =>
    Effect.gen(function* () {
      const png = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52])
      const binary = yield* failure({ bytes: png, filename: "picture.bin" })
      assert.strictEqual(binary._tag, "UnsupportedType")
      assert.strictEqual(binary.code, "unsupported_type")
      assert.strictEqual((yield* failure({ bytes: png }))._tag, "UnsupportedType")
      assert.strictEqual((yield* failure({ bytes: utf8("text"), contentType: "image/png" }))._tag, "UnsupportedType")
      // A zip that is not a Word document (an .xlsx, say).
      const zip = Uint8Array.from([0x50, 0x4b, 0x03, 0x04, ...utf8("xl/workbook.xml"), 0, 0])
      assert.strictEqual((yield* failure({ bytes: zip, filename: "sheet.xlsx" }))._tag, "UnsupportedType")

      const empty = yield* failure({ bytes: new Uint8Array(0), filename: "empty.txt" })
      assert.strictEqual(empty.code, "no_text")
      assert.strictEqual((yield* failure({ bytes: utf8(" \n\n\t"), contentType: "text/markdown" })).code, "no_text")
      assert.strictEqual(
        (yield* failure({ bytes: utf8("<html><script>x()</script></html>"), contentType: "text/html" })).code,
        "no_text"
      )

      const options = { ...defaultExtractOptions, maxBytes: 10 }
      const large = yield* failure({ bytes: utf8("more than ten bytes"), contentType: "text/plain" }, options)
      assert.strictEqual(large.code, "too_large")
      const long = yield* failure(
        { bytes: utf8("0123456789 abc"), contentType: "text/plain" },
        { ...defaultExtractOptions, maxChars: 5 }
      )
      assert.strictEqual(long.code, "too_large")
    })
  )

  it.effect("bounds extraction in time", () =>
    Effect.gen(function* () {
      const bytes = yield* twoPagePdf
      const error = yield* failure({ bytes, contentType: "application/pdf" }, { ...defaultExtractOptions, timeout: 0 })
      assert.strictEqual(error.code, "parse_error")
      assert.include(error.message, "longer than")
    })
  )
})
