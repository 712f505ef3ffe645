import { assert, describe, it } from "@effect/vitest"
import { Document, Packer, Paragraph } from "docx"
import { Effect } from "effect"
import * as Zlib from "node:zlib"
import {
  checkArchive,
  defaultZipLimits,
  readDirectory,
  type ZipEntry,
  type ZipProblem
} from "../../src/Knowledge/Zip.ts"

interface RawEntry {
  readonly name: string
  /** What is stored: deflated unless `method` is 0. */
  readonly data: Uint8Array
  readonly method?: number
  /** What the headers declare, whatever the data inflates to. */
  readonly uncompressedSize: number
  /** Written as 0xFFFFFFFF with the real sizes in a Zip64 extra field. */
  readonly zip64?: boolean
}

/** A zip archive written by hand, so that its headers can say anything. */
const zip = (entries: ReadonlyArray<RawEntry>, options: { readonly comment?: string } = {}) => {
  const locals: Array<Buffer> = []
  const centrals: Array<Buffer> = []
  let offset = 0
  for (const entry of entries) {
    const name = Buffer.from(entry.name, "utf8")
    const method = entry.method ?? 8
    const extra = entry.zip64 === true ? Buffer.alloc(20) : Buffer.alloc(0)
    if (entry.zip64 === true) {
      extra.writeUInt16LE(0x0001, 0)
      extra.writeUInt16LE(16, 2)
      extra.writeBigUInt64LE(BigInt(entry.uncompressedSize), 4)
      extra.writeBigUInt64LE(BigInt(entry.data.length), 12)
    }
    const compressed = entry.zip64 === true ? 0xffffffff : entry.data.length
    const uncompressed = entry.zip64 === true ? 0xffffffff : entry.uncompressedSize
    const local = Buffer.alloc(30)
    local.writeUInt32LE(0x04034b50, 0)
    local.writeUInt16LE(20, 4)
    local.writeUInt16LE(method, 8)
    local.writeUInt32LE(compressed, 18)
    local.writeUInt32LE(uncompressed, 22)
    local.writeUInt16LE(name.length, 26)
    local.writeUInt16LE(extra.length, 28)
    locals.push(local, name, extra, Buffer.from(entry.data))
    const central = Buffer.alloc(46)
    central.writeUInt32LE(0x02014b50, 0)
    central.writeUInt16LE(20, 4)
    central.writeUInt16LE(20, 6)
    central.writeUInt16LE(method, 10)
    central.writeUInt32LE(compressed, 20)
    central.writeUInt32LE(uncompressed, 24)
    central.writeUInt16LE(name.length, 28)
    central.writeUInt16LE(extra.length, 30)
    central.writeUInt32LE(offset, 42)
    centrals.push(central, name, extra)
    offset += 30 + name.length + extra.length + entry.data.length
  }
  const directory = Buffer.concat(centrals)
  const comment = Buffer.from(options.comment ?? "", "utf8")
  const end = Buffer.alloc(22)
  end.writeUInt32LE(0x06054b50, 0)
  end.writeUInt16LE(entries.length, 8)
  end.writeUInt16LE(entries.length, 10)
  end.writeUInt32LE(directory.length, 12)
  end.writeUInt32LE(offset, 16)
  end.writeUInt16LE(comment.length, 20)
  return new Uint8Array(Buffer.concat([...locals, directory, end, comment]))
}

const deflated = (name: string, content: Buffer | string, declared?: number): RawEntry => {
  const bytes = typeof content === "string" ? Buffer.from(content) : content
  return { name, data: Zlib.deflateRawSync(bytes), uncompressedSize: declared ?? bytes.length }
}

const entriesOf = (bytes: Uint8Array) => {
  const entries = readDirectory(bytes)
  if (!Array.isArray(entries)) throw new Error(`not read: ${(entries as ZipProblem).message}`)
  return entries as ReadonlyArray<ZipEntry>
}

describe("Zip", () => {
  it.effect("reads the directory of a DOCX written by a real library, and passes it", () =>
    Effect.gen(function* () {
      const bytes = new Uint8Array(
        yield* Effect.promise(() =>
          Packer.toBuffer(new Document({ sections: [{ children: [new Paragraph("Otters live in rivers.")] }] }))
        )
      )
      const entries = entriesOf(bytes)
      const document = entries.find((entry) => entry.name === "word/document.xml")
      assert.isDefined(document)
      assert.strictEqual(document!.method, 8)
      assert.isAbove(document!.uncompressedSize, 0)
      assert.isUndefined(checkArchive(bytes))
    })
  )

  it("reads stored and deflated entries with their sizes, after a comment", () => {
    const text = "<w:p>lorem ipsum</w:p>".repeat(100)
    const bytes = zip(
      [
        { name: "mimetype", data: Buffer.from("application/zip"), method: 0, uncompressedSize: 15 },
        deflated("word/document.xml", text)
      ],
      { comment: "written by hand" }
    )
    const entries = entriesOf(bytes)
    assert.deepStrictEqual(
      entries.map((entry) => [entry.name, entry.method, entry.uncompressedSize]),
      [
        ["mimetype", 0, 15],
        ["word/document.xml", 8, text.length]
      ]
    )
    assert.strictEqual(entries[1]!.localHeaderOffset, 30 + "mimetype".length + 15)
    assert.isUndefined(checkArchive(bytes))
  })

  it("refuses an entry that declares more than the bound, naming it and the bound", () => {
    const bytes = zip([deflated("word/document.xml", "<w:p/>", 60 * 1024 * 1024)])
    const problem = checkArchive(bytes)
    assert.strictEqual(problem?.kind, "too_large")
    assert.include(problem!.message, "word/document.xml")
    assert.include(problem!.message, "60 MB")
    assert.include(problem!.message, "50 MB")
    assert.include(problem!.message, "EXTRACTION_ZIP_MAX_ENTRY_BYTES")
  })

  it("refuses an entry that expands more than the ratio, but not a small one", () => {
    const xml = Buffer.from("<w:p><w:r><w:t>lorem ipsum dolor</w:t></w:r></w:p>".repeat(60_000))
    const bomb = zip([deflated("word/document.xml", xml)])
    const problem = checkArchive(bomb)
    assert.strictEqual(problem?.kind, "too_large")
    assert.match(problem!.message, /word\/document\.xml expands \d+ times/)
    assert.include(problem!.message, "at most 100 times")
    // The same ratio under the floor (tiny repetitive parts, styles) is fine.
    const small = zip([deflated("word/styles.xml", xml.subarray(0, 500_000))])
    assert.isUndefined(checkArchive(small))
    // And the ratio is a setting.
    assert.isUndefined(checkArchive(bomb, { ...defaultZipLimits, maxRatio: 100_000 }))
  })

  it("refuses an entry whose headers claim a small size but which inflates far, after at most its declared size", () => {
    const far = Buffer.alloc(64 * 1024 * 1024, "<w:p/>")
    const liar = zip([deflated("word/document.xml", far, 2_000)])
    assert.isBelow(liar.length, 200_000)
    const started = Date.now()
    const problem = checkArchive(liar)
    assert.strictEqual(problem?.kind, "too_large")
    assert.include(problem!.message, "word/document.xml inflates past the 2000 bytes its headers declare")
    // Stopped at the declared size, not after 64 MB.
    assert.isBelow(Date.now() - started, 200)
  })

  it("reads Zip64 sizes from the extra field", () => {
    const text = "<w:p>zip64</w:p>"
    const bytes = zip([{ ...deflated("word/document.xml", text), zip64: true }])
    const [entry] = entriesOf(bytes)
    assert.strictEqual(entry!.uncompressedSize, text.length)
    assert.isUndefined(checkArchive(bytes))
    const huge = zip([{ ...deflated("word/document.xml", text, 2 ** 40), zip64: true }])
    assert.strictEqual(checkArchive(huge)?.kind, "too_large")
  })

  it("refuses the total of many entries, too many entries and damaged archives", () => {
    // Three entries of 40 MB each, 120 MB together; the ratio is lifted to see the total alone.
    const three = Array.from({ length: 3 }, (_, i) => deflated(`word/part${i}.xml`, "<w:p/>", 40 * 1024 * 1024))
    const total = checkArchive(zip(three), { ...defaultZipLimits, maxRatio: Number.MAX_SAFE_INTEGER })
    assert.strictEqual(total?.kind, "too_large")
    assert.include(total!.message, "together")
    const many = zip(Array.from({ length: 11 }, (_, i) => deflated(`f${i}`, "x")))
    const tooMany = checkArchive(many, { ...defaultZipLimits, maxEntries: 10 })
    assert.strictEqual(tooMany?.kind, "too_large")
    assert.include(tooMany!.message, "11 entries")

    const good = zip([deflated("word/document.xml", "<w:p>text</w:p>")])
    assert.strictEqual(checkArchive(good.subarray(0, good.length - 5))?.kind, "damaged")
    assert.strictEqual(checkArchive(new Uint8Array([0x50, 0x4b, 0x03, 0x04, 1, 2, 3]))?.kind, "damaged")
    // A directory offset past the end of the file.
    const offset = Buffer.from(good)
    offset.writeUInt32LE(0x7fffffff, offset.length - 6)
    assert.strictEqual(checkArchive(new Uint8Array(offset))?.kind, "damaged")
    // Data that is not deflate at all.
    const garbage = zip([
      { name: "word/document.xml", data: Buffer.from([0xff, 0xff, 0xff, 0xff]), uncompressedSize: 10 }
    ])
    const damaged = checkArchive(garbage)
    assert.strictEqual(damaged?.kind, "damaged")
    assert.include(damaged!.message, "word/document.xml")
    // A method DOCX readers cannot read.
    const bzip = zip([{ name: "a", data: Buffer.from("x"), method: 12, uncompressedSize: 1 }])
    assert.include(checkArchive(bzip)!.message, "compression method 12")
  })
})
