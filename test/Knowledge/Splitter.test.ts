import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import fc from "fast-check"
import {
  type Chunking,
  chunkingProblems,
  maxChunkSize,
  minChunkSize,
  validateChunking
} from "../../src/Knowledge/Chunking.ts"
import { type Chunk, chunkText, markdownHeadings, split } from "../../src/Knowledge/Splitter.ts"
import { countTokens } from "../../src/Models/Tokens.ts"

// Fragments the generated texts are made of: every script and shape the splitter must handle.
const fragments = [
  "The quick brown fox jumps over the lazy dog. ",
  "Otters float by the river bank; meanwhile, numbers like 3.14159 and 2026 appear! ",
  "Is this a question? Yes. ",
  "我们今天去公园散步，天气很好。",
  "知识库把文档切成小块，以便检索。中文没有空格，所以需要按句子和词来切分。",
  "日本語のテキストも少し含まれています。これはテストの文章です。",
  "ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำ",
  "สวัสดีครับ ยินดีต้อนรับ",
  "\n\n",
  "\n",
  "\n\n\n\n\n",
  "   ",
  "\t",
  "# Install\n",
  "## Linux\n",
  "### Debian\n",
  "## macOS\n",
  "😀🎉👩‍👩‍👧 ",
  "𠀀𠀁𠀂",
  "Supercalifragilisticexpialidocious",
  "https://example.com/a/very/long/path?with=query&and=more#fragment ",
  "<|endoftext|> ",
  "```\ncode block\n```\n",
  "- item one\n- item two\n",
  "x = 1; y = 2; z = x + y;\n"
]
const longRuns = [
  () => "a".repeat(3000),
  () => "中".repeat(2500),
  () => "ab1".repeat(700),
  () => "😀".repeat(900),
  () => " ".repeat(1500),
  () => "-".repeat(2000),
  () => "ไทย".repeat(600)
]

const textArbitrary = fc
  .array(
    fc.oneof(
      { weight: 12, arbitrary: fc.constantFrom(...fragments) },
      { weight: 1, arbitrary: fc.constantFrom(...longRuns).map((make) => make()) },
      { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 40 }) }
    ),
    { minLength: 0, maxLength: 400 }
  )
  .map((parts) => parts.join(""))

const chunkingArbitrary = fc
  .record({
    strategy: fc.constantFrom("auto" as const, "recursive" as const, "markdown" as const, "sentence" as const),
    chunkSize: fc.oneof(
      fc.integer({ min: minChunkSize, max: 300 }),
      fc.integer({ min: minChunkSize, max: maxChunkSize })
    ),
    overlapShare: fc.double({ min: 0, max: 0.5, noNaN: true })
  })
  .map(
    ({ chunkSize, overlapShare, strategy }): Chunking => ({
      strategy,
      chunkSize,
      chunkOverlap: Math.floor(chunkSize * overlapShare)
    })
  )

const isBlank = (text: string) => text.trim() === ""

/** Every guarantee of the splitter, on one text. */
const checkChunks = (text: string, chunking: Chunking, chunks: ReadonlyArray<Chunk>) => {
  let coveredTo = 0
  let previous: Chunk | undefined
  for (const [index, chunk] of chunks.entries()) {
    assert.strictEqual(chunk.index, index)
    // Offsets map back to the exact text.
    assert.strictEqual(text.slice(chunk.startOffset, chunk.endOffset), chunk.content)
    assert.isFalse(isBlank(chunk.content), "a chunk holds text")
    // The hard bound, by the service's own count.
    const tokens = countTokens(chunk.content)
    assert.strictEqual(chunk.tokenCount, tokens)
    assert.isAtMost(tokens, chunking.chunkSize)
    if (previous !== undefined) {
      // In order, never starting before the chunk before.
      assert.isAbove(chunk.startOffset, previous.startOffset)
      assert.isAbove(chunk.endOffset, previous.endOffset)
      // The overlap with the chunk before stays within its bound.
      if (chunk.startOffset < previous.endOffset) {
        assert.isAtMost(countTokens(text.slice(chunk.startOffset, previous.endOffset)), chunking.chunkOverlap)
      }
    }
    // Coverage: whatever lies between what is covered and this chunk is whitespace.
    if (chunk.startOffset > coveredTo)
      assert.isTrue(isBlank(text.slice(coveredTo, chunk.startOffset)), "nothing is skipped")
    coveredTo = Math.max(coveredTo, chunk.endOffset)
    previous = chunk
  }
  assert.isTrue(isBlank(text.slice(coveredTo)), "the end is covered")
}

describe("Splitter", () => {
  it("keeps every guarantee on random texts, strategies, sizes and overlaps", () => {
    fc.assert(
      fc.property(textArbitrary, chunkingArbitrary, (text, chunking) => {
        checkChunks(text, chunking, split({ text, kind: "markdown" }, chunking))
      }),
      { seed: 20261123, numRuns: 400 }
    )
  })

  it("keeps every guarantee on plain text with auto", () => {
    fc.assert(
      fc.property(textArbitrary, chunkingArbitrary, (text, chunking) => {
        checkChunks(text, { ...chunking, strategy: "auto" }, split({ text }, { ...chunking, strategy: "auto" }))
      }),
      { seed: 7, numRuns: 150 }
    )
  })

  it("overlaps consecutive chunks when asked, and not when not", () => {
    const text = Array.from({ length: 400 }, (_, i) => `Sentence number ${i} talks about otters and rivers.`).join(" ")
    const chunks = split({ text }, { strategy: "recursive", chunkSize: 128, chunkOverlap: 32 })
    assert.isAbove(chunks.length, 20)
    for (let i = 1; i < chunks.length; i++) {
      const shared = countTokens(text.slice(chunks[i]!.startOffset, chunks[i - 1]!.endOffset))
      assert.isAtMost(shared, 32)
      assert.isAtLeast(shared, 16)
      // Sentence-aligned: the repeated part starts a sentence.
      assert.match(chunks[i]!.content, /^Sentence number/)
    }
    const none = split({ text }, { strategy: "recursive", chunkSize: 128, chunkOverlap: 0 })
    for (let i = 1; i < none.length; i++) assert.isAtLeast(none[i]!.startOffset, none[i - 1]!.endOffset)
  })

  it("splits Chinese, Japanese and Thai without spaces into many chunks of sensible size", () => {
    const cases = [
      "我们今天去公园散步，天气很好。知识库把文档切成小块，以便检索。中文没有空格，所以需要按句子和词来切分。".repeat(
        120
      ),
      "日本語のテキストも少し含まれています。これはテストの文章です。検索のために文書を小さな塊に分けます。".repeat(
        120
      ),
      "ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำและประโยคจึงต้องใช้พจนานุกรมในการตัดคำ".repeat(150)
    ]
    for (const text of cases) {
      const chunking = { strategy: "auto" as const, chunkSize: 128, chunkOverlap: 16 }
      const chunks = split({ text }, chunking)
      checkChunks(text, chunking, chunks)
      const total = countTokens(text)
      assert.isAtLeast(chunks.length, Math.floor(total / 128))
      // All but the last are well filled: the text is not cut into crumbs either.
      for (const chunk of chunks.slice(0, -1)) assert.isAtLeast(chunk.tokenCount, 64)
    }
    // Chinese chunks end at sentence ends.
    const chinese = split({ text: cases[0]! }, { strategy: "sentence", chunkSize: 128, chunkOverlap: 0 })
    for (const chunk of chinese.slice(0, -1)) assert.match(chunk.content, /[。，]$/)
  })

  it("gives each markdown chunk its heading path and never spans two sections", () => {
    const text = [
      "Intro before any heading.",
      "",
      "# Install",
      "",
      "Get the package first.",
      "",
      "## Linux",
      "",
      "Run the installer with apt. ".repeat(80),
      "",
      "### Debian",
      "",
      "Use apt-get on Debian.",
      "",
      "## macOS",
      "",
      "```",
      "# not a heading inside a fence",
      "```",
      "",
      "Usage",
      "=====",
      "",
      "Run it."
    ].join("\n")
    assert.deepStrictEqual(
      markdownHeadings(text).map((h) => [h.level, h.title]),
      [
        [1, "Install"],
        [2, "Linux"],
        [3, "Debian"],
        [2, "macOS"],
        [1, "Usage"]
      ]
    )
    const chunking = { strategy: "markdown" as const, chunkSize: 64, chunkOverlap: 8 }
    const chunks = split({ text }, chunking)
    checkChunks(text, chunking, chunks)
    const paths = chunks.map((chunk) => chunk.headingPath.join(" > "))
    assert.strictEqual(paths[0], "")
    assert.strictEqual(paths[1], "Install")
    assert.isAbove(paths.filter((path) => path === "Install > Linux").length, 3)
    assert.include(paths, "Install > Linux > Debian")
    assert.include(paths, "Install > macOS")
    assert.strictEqual(paths.at(-1), "Usage")
    for (const chunk of chunks) {
      const heading = markdownHeadings(chunk.content)
      assert.isAtMost(heading.length, 1, "one section per chunk")
      if (chunk.headingPath.at(-1) === "Linux") assert.notInclude(chunk.content, "Debian")
    }
    const debian = chunks.find((chunk) => chunk.headingPath.at(-1) === "Debian")!
    assert.strictEqual(debian.content, "### Debian\n\nUse apt-get on Debian.")
  })

  it("reads ATX closing sequences and stays linear on hostile heading lines", () => {
    assert.deepStrictEqual(
      markdownHeadings("# Title #\n## Sub ##  \n### C# language\n#nope\n####### seven").map((h) => h.title),
      ["Title", "Sub", "C# language"]
    )
    // Quadratic scanning of this line would run past the test's timeout.
    assert.deepStrictEqual(markdownHeadings(`# ${" #".repeat(200_000)}x`).length, 1)
  })

  it("uses headings given by the extractor and page starts", () => {
    const text = "Title\n\nFirst page text.\n\nSecond page text here."
    const pages = [0, text.indexOf("Second")]
    const chunks = split(
      { text, kind: "html", headings: [{ offset: 0, level: 1, title: "Title" }], pages },
      { strategy: "recursive", chunkSize: 64, chunkOverlap: 0 }
    )
    assert.strictEqual(chunks.length, 1)
    assert.strictEqual(chunks[0]!.page, 1)
    const byPage = split(
      { text: `a\n\n${"word ".repeat(200)}`, pages: [0, 3] },
      { strategy: "recursive", chunkSize: 64, chunkOverlap: 0 }
    )
    assert.strictEqual(byPage[0]!.page, 1)
    assert.strictEqual(byPage.at(-1)!.page, 2)
    const html = split(
      { text, kind: "html", headings: [{ offset: 0, level: 1, title: "Title" }] },
      {
        strategy: "auto",
        chunkSize: 64,
        chunkOverlap: 0
      }
    )
    assert.deepStrictEqual(html[0]!.headingPath, ["Title"])
    assert.isUndefined(html[0]!.page)
  })

  it("adds no chunk of overlap and trailing whitespace alone", () => {
    const text = `${"中".repeat(2500)}สวัสดีครับ ยินดีต้อนรับ\n\n\n\n\n`
    const chunking = { strategy: "auto" as const, chunkSize: 64, chunkOverlap: 13 }
    const chunks = split({ text }, chunking)
    checkChunks(text, chunking, chunks)
    assert.strictEqual(chunks.at(-1)!.endOffset, text.trimEnd().length)
    assert.strictEqual(chunks.filter((chunk) => chunk.endOffset === text.trimEnd().length).length, 1)
  })

  it("returns no chunks for empty or blank text", () => {
    assert.deepStrictEqual(split({ text: "" }, { strategy: "auto", chunkSize: 64, chunkOverlap: 0 }), [])
    assert.deepStrictEqual(split({ text: " \n\n\t " }, { strategy: "markdown", chunkSize: 64, chunkOverlap: 0 }), [])
  })

  it("validates settings with clear messages", () => {
    assert.deepStrictEqual(chunkingProblems({}), [])
    assert.deepStrictEqual(chunkingProblems({ chunkSize: 63 }), ["chunkSize must be an integer from 64 to 4096 tokens"])
    assert.deepStrictEqual(chunkingProblems({ chunkSize: 4097 }), [
      "chunkSize must be an integer from 64 to 4096 tokens"
    ])
    assert.deepStrictEqual(chunkingProblems({ chunkSize: 100, chunkOverlap: 51 }), [
      "chunkOverlap must be at most half of chunkSize (50 tokens for 100)"
    ])
    assert.deepStrictEqual(chunkingProblems({ chunkOverlap: -1, strategy: "fixed" }), [
      "strategy must be one of auto, recursive, markdown, sentence",
      "chunkOverlap must be an integer of at least 0 tokens"
    ])
    assert.deepStrictEqual(chunkingProblems({ chunkSize: 100.5 }), [
      "chunkSize must be an integer from 64 to 4096 tokens"
    ])
    assert.deepStrictEqual(Effect.runSync(validateChunking({})), { strategy: "auto", chunkSize: 512, chunkOverlap: 64 })
    const failed = Effect.runSyncExit(chunkText({ text: "hello" }, { chunkSize: 10 }))
    assert.isTrue(Exit.isFailure(failed))
    const error = Effect.runSync(Effect.flip(validateChunking({ chunkSize: 10 })))
    assert.strictEqual(error._tag, "InvalidChunking")
    assert.strictEqual(error.message, "Invalid chunking: chunkSize must be an integer from 64 to 4096 tokens.")
  })

  // Its speed is measured by `npm run bench:chunking`.
  it("splits a megabyte within the bound", () => {
    const text = Array.from({ length: 4000 }, (_, i) =>
      `Paragraph ${i}. The quick brown fox jumps over the lazy dog; 我们今天去公园散步。`.repeat(4)
    ).join("\n\n")
    const chunks = split({ text }, { strategy: "auto", chunkSize: 512, chunkOverlap: 64 })
    assert.isAbove(chunks.length, 100)
    for (const chunk of chunks) {
      assert.isAtMost(chunk.tokenCount, 512)
      assert.strictEqual(text.slice(chunk.startOffset, chunk.endOffset), chunk.content)
    }
  })
})
