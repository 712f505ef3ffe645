import { assert, describe, layer } from "@effect/vitest"
import { Document as DocxDocument, HeadingLevel, Packer, Paragraph } from "docx"
import { Effect } from "effect"
import { PDFDocument, rgb, StandardFonts } from "pdf-lib"
import { countTokens } from "../../src/Models/Tokens.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

const maxUploadBytes = 256 * 1024

const session = (account: Account) => TestServer.bearer(account.token)

const createBase = (account: Account, body: Record<string, unknown> = {}) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const created = yield* client.request("POST", "/api/knowledge", {
      headers: session(account),
      body: { name: "Docs", ...body }
    })
    assert.strictEqual(created.status, 201, created.text)
    return created.body as { id: string; [key: string]: any }
  })

const uploadJson = (account: Account, knowledgeId: string, body: Record<string, unknown>, query = "") =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/knowledge/${knowledgeId}/upload${query}`, { headers: session(account), body })
  )

const uploadForm = (
  account: Account,
  knowledgeId: string,
  files: ReadonlyArray<{ name: string; type: string; bytes: Uint8Array }>,
  fields: Record<string, string> = {}
) =>
  Effect.flatMap(TestClient, (client) =>
    Effect.promise(async () => {
      const form = new FormData()
      for (const file of files) form.append("files", new Blob([file.bytes], { type: file.type }), file.name)
      for (const [name, value] of Object.entries(fields)) form.append(name, value)
      const response = await fetch(`${client.baseUrl}/api/knowledge/${knowledgeId}/upload`, {
        method: "POST",
        headers: session(account),
        body: form
      })
      const text = await response.text()
      return { status: response.status, text, body: text === "" ? undefined : JSON.parse(text) }
    })
  )

/** Polls the document until it is no longer processing. */
const settled = (account: Account, knowledgeId: string, documentId: string) =>
  Effect.flatMap(TestClient, (client) =>
    eventually(
      Effect.map(
        client.request("GET", `/api/knowledge/${knowledgeId}/documents/${documentId}`, { headers: session(account) }),
        (got) => {
          assert.strictEqual(got.status, 200, got.text)
          assert.notStrictEqual(got.body.status, "processing", `document ${documentId} still processing`)
          return got.body
        }
      ),
      { timeoutMs: 30_000 }
    )
  )

const allChunks = (account: Account, knowledgeId: string, documentId?: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const chunks: Array<any> = []
    let cursor: string | null = null
    do {
      const query: URLSearchParams = new URLSearchParams({
        limit: "7",
        ...(documentId ? { documentId } : {}),
        ...(cursor ? { cursor } : {})
      })
      const page: TestServer.TestResponse = yield* client.request(
        "GET",
        `/api/knowledge/${knowledgeId}/chunks?${query}`,
        { headers: session(account) }
      )
      assert.strictEqual(page.status, 200, page.text)
      chunks.push(...page.body.data)
      cursor = page.body.nextCursor
    } while (cursor !== null)
    return chunks
  })

const pdfOf = async (pages: ReadonlyArray<string>) => {
  const pdf = await PDFDocument.create()
  const font = await pdf.embedFont(StandardFonts.Helvetica)
  for (const text of pages) {
    const page = pdf.addPage([600, 400])
    page.drawText(text, { x: 40, y: 340, size: 12, font, maxWidth: 520, lineHeight: 16 })
  }
  return pdf.save()
}

const scannedPdf = async () => {
  const pdf = await PDFDocument.create()
  const page = pdf.addPage([600, 400])
  page.drawRectangle({ x: 50, y: 50, width: 300, height: 200, color: rgb(0.2, 0.3, 0.4) })
  return pdf.save()
}

const docxOf = () =>
  Packer.toBuffer(
    new DocxDocument({
      sections: [
        {
          children: [
            new Paragraph({ text: "Install", heading: HeadingLevel.HEADING_1 }),
            new Paragraph({ text: "Linux", heading: HeadingLevel.HEADING_2 }),
            new Paragraph("Unpack the archive and enable the systemd unit.")
          ]
        }
      ]
    })
  )

layer(TestServer.layer({ maxUploadBytes }), { excludeTestServices: true })("knowledge bases", (it) => {
  describe("bases", () => {
    it.effect("create with defaults, read, update, list in pages, delete; bad fields are 400s naming them", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const base = yield* createBase(account, { description: "Product docs" })
        assert.deepStrictEqual(base.chunking, { strategy: "auto", chunkSize: 512, chunkOverlap: 64 })
        assert.strictEqual(base.language, "simple")
        assert.deepStrictEqual([base.documentCount, base.chunkCount, base.tokenCount], [0, 0, 0])
        const english = yield* createBase(account, {
          name: "English",
          language: "english",
          chunking: { chunkSize: 256 }
        })
        assert.deepStrictEqual(english.chunking, { strategy: "auto", chunkSize: 256, chunkOverlap: 64 })

        const cases: ReadonlyArray<readonly [Record<string, unknown>, ReadonlyArray<string>]> = [
          [{ name: "" }, ["payload", "name"]],
          [{ name: "X", language: "klingon" }, ["payload", "language"]],
          [{ name: "X", language: "Robert'); DROP" }, ["payload", "language"]],
          [{ name: "X", chunking: { chunkSize: 10 } }, ["payload", "chunking", "chunkSize"]],
          [{ name: "X", chunking: { chunkSize: 100, chunkOverlap: 60 } }, ["payload", "chunking", "chunkOverlap"]],
          [{ name: "X", chunking: { strategy: "words" } }, ["payload", "chunking", "strategy"]]
        ]
        for (const [body, path] of cases) {
          const bad = yield* client.request("POST", "/api/knowledge", { headers: session(account), body })
          assert.strictEqual(bad.status, 400, JSON.stringify(body))
          assert.deepStrictEqual(bad.body.errors[0].path, path, JSON.stringify(body))
        }

        const updated = yield* client.request("PUT", `/api/knowledge/${base.id}`, {
          headers: session(account),
          body: { name: "Renamed", chunking: { strategy: "sentence", chunkOverlap: 0 } }
        })
        assert.strictEqual(updated.status, 200, updated.text)
        assert.deepStrictEqual([updated.body.name, updated.body.description], ["Renamed", "Product docs"])
        assert.deepStrictEqual(updated.body.chunking, { strategy: "sentence", chunkSize: 512, chunkOverlap: 0 })

        const first = yield* client.request("GET", "/api/knowledge?limit=1", { headers: session(account) })
        assert.deepStrictEqual([first.body.total, first.body.data.length, first.body.data[0].id], [2, 1, base.id])
        const second = yield* client.request("GET", `/api/knowledge?limit=1&cursor=${first.body.nextCursor}`, {
          headers: session(account)
        })
        assert.deepStrictEqual([second.body.data[0].id, second.body.nextCursor], [english.id, null])

        assert.strictEqual(
          (yield* client.request("DELETE", `/api/knowledge/${english.id}`, { headers: session(account) })).status,
          204
        )
        assert.strictEqual(
          (yield* client.request("GET", `/api/knowledge/${english.id}`, { headers: session(account) })).status,
          404
        )
      })
    )
  })

  describe("uploads", () => {
    it.effect(
      "text, Markdown, HTML, JSON and CSV through JSON uploads: ready at once, chunked, with heading paths",
      () =>
        Effect.gen(function* () {
          const account = yield* TestServer.signUp()
          const base = yield* createBase(account)
          const markdown = "# Install\n\n## Linux\n\nUnpack the archive into /opt.\n\n## macOS\n\nUse Homebrew.\n"
          const cases: ReadonlyArray<readonly [string, string | undefined, string, string]> = [
            ["notes.txt", "text/plain", "Plain notes about the harbour lantern.", "text/plain"],
            ["guide.md", undefined, markdown, "text/markdown"],
            [
              "page.html",
              "text/html",
              "<html><body><h1>Billing</h1><p>Invoices are monthly.</p></body></html>",
              "text/html"
            ],
            ["data.json", "application/json", JSON.stringify({ product: "lantern", price: 12 }), "application/json"],
            ["table.csv", "text/csv", "name,price\nlantern,12\nrope,3\n", "text/csv"]
          ]
          for (const [filename, contentType, content, expectedType] of cases) {
            const uploaded = yield* uploadJson(account, base.id, {
              filename,
              content,
              ...(contentType ? { contentType } : {})
            })
            assert.strictEqual(uploaded.status, 201, `${filename}: ${uploaded.text}`)
            assert.strictEqual(uploaded.body.status, "ready", filename)
            assert.strictEqual(uploaded.body.contentType, expectedType, filename)
            assert.isAbove(uploaded.body.chunkCount, 0, filename)
            assert.match(uploaded.body.sha256, /^[0-9a-f]{64}$/)
          }
          const documents = yield* Effect.flatMap(TestClient, (client) =>
            client.request("GET", `/api/knowledge/${base.id}/documents`, { headers: session(account) })
          )
          assert.strictEqual(documents.body.total, 5)
          const guide = documents.body.data.find((d: any) => d.filename === "guide.md")
          const chunks = yield* allChunks(account, base.id, guide.id)
          assert.deepStrictEqual(
            chunks.map((c) => c.headingPath),
            [["Install"], ["Install", "Linux"], ["Install", "macOS"]]
          )
          assert.include(chunks[1].content, "Unpack the archive")
          for (const chunk of chunks)
            assert.strictEqual(markdown.slice(chunk.startOffset, chunk.endOffset), chunk.content)
          const refreshed = yield* Effect.flatMap(TestClient, (client) =>
            client.request("GET", `/api/knowledge/${base.id}`, { headers: session(account) })
          )
          assert.strictEqual(refreshed.body.documentCount, 5)
          assert.strictEqual(refreshed.body.chunkCount, (yield* allChunks(account, base.id)).length)
        })
    )

    it.effect(
      "a real PDF (pages on chunks), a real DOCX (headings) and a scanned PDF (failed with no_text) through multipart",
      () =>
        Effect.gen(function* () {
          const account = yield* TestServer.signUp()
          const base = yield* createBase(account)
          const sentences = (page: string) =>
            Array.from(
              { length: 8 },
              (_, i) => `${page} page, sentence ${i + 1}, is about lanterns and harbours.`
            ).join(" ")
          const pdf = yield* Effect.promise(() => pdfOf([sentences("First"), sentences("Second")]))
          const docx = yield* Effect.promise(docxOf)
          const scan = yield* Effect.promise(scannedPdf)
          const uploaded = yield* uploadForm(
            account,
            base.id,
            [
              { name: "manual.pdf", type: "application/pdf", bytes: pdf },
              {
                name: "guide.docx",
                type: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                bytes: docx
              },
              { name: "scan.pdf", type: "application/pdf", bytes: scan }
            ],
            { chunkSize: "64", chunkOverlap: "0" }
          )
          assert.strictEqual(uploaded.status, 202, uploaded.text)
          assert.strictEqual(uploaded.body.data.length, 3)
          const [manual, guide, scanned] = yield* Effect.forEach(uploaded.body.data, (d: any) =>
            settled(account, base.id, d.id)
          )
          assert.strictEqual(manual.status, "ready", JSON.stringify(manual))
          assert.deepStrictEqual(manual.chunking, { strategy: "auto", chunkSize: 64, chunkOverlap: 0 })
          const manualChunks = yield* allChunks(account, base.id, manual.id)
          assert.isAbove(manualChunks.length, 2)
          assert.strictEqual(manualChunks[0].page, 1)
          const pages = manualChunks.map((chunk) => chunk.page)
          assert.deepStrictEqual(pages, [...pages].sort())
          // A chunk that starts on the second page says so.
          const second = manualChunks.find((chunk) => chunk.content.startsWith("Second page"))
          assert.strictEqual(second?.page, 2, JSON.stringify(manualChunks.map((c) => [c.page, c.content.slice(0, 30)])))
          for (const chunk of manualChunks) assert.isAtMost(chunk.tokenCount, 64)
          assert.strictEqual(guide.status, "ready", JSON.stringify(guide))
          const guideChunks = yield* allChunks(account, base.id, guide.id)
          assert.deepStrictEqual(guideChunks.at(-1).headingPath, ["Install", "Linux"])
          assert.include(guideChunks.at(-1).content, "systemd unit")
          assert.strictEqual(scanned.status, "failed")
          assert.strictEqual(scanned.error.code, "no_text")
          assert.strictEqual(scanned.chunkCount, 0)
          // Form fields are checked like JSON ones.
          const bad = yield* uploadForm(
            account,
            base.id,
            [{ name: "x.txt", type: "text/plain", bytes: Buffer.from("x") }],
            {
              strategy: "words",
              chunkSize: "abc"
            }
          )
          assert.strictEqual(bad.status, 400, bad.text)
          assert.deepStrictEqual(
            bad.body.errors.map((e: any) => e.path),
            [["payload", "chunkSize"]]
          )
          const badStrategy = yield* uploadForm(
            account,
            base.id,
            [{ name: "x.txt", type: "text/plain", bytes: Buffer.from("x") }],
            {
              strategy: "words"
            }
          )
          assert.strictEqual(badStrategy.status, 400, badStrategy.text)
          assert.deepStrictEqual(
            badStrategy.body.errors.map((e: any) => e.path),
            [["payload", "strategy"]]
          )
        })
    )

    it.effect(
      "413 beyond MAX_UPLOAD_BYTES, 415 for unsupported types, 409 for the same bytes unless duplicates=allow",
      () =>
        Effect.gen(function* () {
          const account = yield* TestServer.signUp()
          const base = yield* createBase(account)
          const big = "lantern ".repeat(Math.ceil((maxUploadBytes + 10) / 8))
          const tooLarge = yield* uploadJson(account, base.id, { filename: "big.txt", content: big })
          assert.strictEqual(tooLarge.status, 413, tooLarge.text)
          assert.strictEqual(tooLarge.body.limit, maxUploadBytes)
          const tooLargeForm = yield* uploadForm(account, base.id, [
            { name: "big.txt", type: "text/plain", bytes: Buffer.from(big) }
          ])
          assert.strictEqual(tooLargeForm.status, 413, tooLargeForm.text)
          const wayTooLarge = yield* uploadJson(account, base.id, { filename: "huge.txt", content: big.repeat(3) })
          assert.strictEqual(wayTooLarge.status, 413)

          const png = Buffer.from("89504e470d0a1a0a0000000d49484452", "hex")
          const unsupported = yield* uploadJson(account, base.id, {
            filename: "logo.png",
            content: png.toString("base64"),
            encoding: "base64"
          })
          assert.strictEqual(unsupported.status, 415, unsupported.text)
          const declared = yield* uploadJson(account, base.id, {
            filename: "sheet.xlsx",
            contentType: "application/vnd.ms-excel",
            content: "a,b"
          })
          assert.strictEqual(declared.status, 415, declared.text)

          const first = yield* uploadJson(account, base.id, { filename: "a.txt", content: "The same words." })
          assert.strictEqual(first.status, 201)
          const again = yield* uploadJson(account, base.id, { filename: "b.txt", content: "The same words." })
          assert.strictEqual(again.status, 409, again.text)
          assert.strictEqual(again.body.documentId, first.body.id)
          const allowed = yield* uploadJson(
            account,
            base.id,
            { filename: "b.txt", content: "The same words." },
            "?duplicates=allow"
          )
          assert.strictEqual(allowed.status, 201, allowed.text)
          // Another base is another set of documents.
          const other = yield* createBase(account, { name: "Other" })
          assert.strictEqual(
            (yield* uploadJson(account, other.id, { filename: "a.txt", content: "The same words." })).status,
            201
          )

          const empty = yield* uploadJson(account, base.id, { filename: "empty.txt", content: "   \n" })
          assert.strictEqual(empty.status, 201, empty.text)
          assert.deepStrictEqual(
            [empty.body.status, empty.body.error.code, empty.body.chunkCount],
            ["failed", "no_text", 0]
          )
          const badBase64 = yield* uploadJson(account, base.id, {
            filename: "x.bin",
            content: "not base64!",
            encoding: "base64"
          })
          assert.strictEqual(badBase64.status, 400)
          assert.deepStrictEqual(badBase64.body.errors[0].path, ["payload", "content"])
          const badChunking = yield* uploadJson(account, base.id, {
            filename: "c.txt",
            content: "words",
            chunking: { chunkSize: 5000 }
          })
          assert.strictEqual(badChunking.status, 400)
          assert.deepStrictEqual(badChunking.body.errors[0].path, ["payload", "chunking", "chunkSize"])
        })
    )

    it.effect("Chinese and Japanese text is split into many chunks, each within chunkSize, offsets exact", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const base = yield* createBase(account, { chunking: { chunkSize: 64, chunkOverlap: 8 } })
        const text = Array.from({ length: 60 }, (_, i) =>
          i % 2 === 0 ? "知识库把文档切成小块，以便检索和回答问题。" : "東京駅から新幹線で大阪まで約二時間半です。"
        ).join("")
        const uploaded = yield* uploadJson(account, base.id, { filename: "cjk.txt", content: text })
        assert.strictEqual(uploaded.status, 201, uploaded.text)
        const chunks = yield* allChunks(account, base.id, uploaded.body.id)
        assert.isAbove(chunks.length, 10)
        for (const chunk of chunks) {
          assert.isAtMost(countTokens(chunk.content), 64)
          assert.strictEqual(chunk.tokenCount, countTokens(chunk.content))
          assert.strictEqual(text.slice(chunk.startOffset, chunk.endOffset), chunk.content)
        }
        assert.strictEqual(chunks[0].startOffset, 0)
        assert.strictEqual(chunks.at(-1).endOffset, text.length)
      })
    )
  })

  describe("rechunk", () => {
    it.effect(
      "replaces one document's chunks at once: concurrent readers see the old set or the new one, never a mix",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const account = yield* TestServer.signUp()
          const base = yield* createBase(account, { chunking: { chunkSize: 64, chunkOverlap: 0 } })
          const text = Array.from(
            { length: 200 },
            (_, i) => `Sentence number ${i} talks about lanterns and harbours.`
          ).join(" ")
          const document = (yield* uploadJson(account, base.id, { filename: "long.txt", content: text })).body
          const other = (yield* uploadJson(account, base.id, { filename: "other.txt", content: "Untouched." })).body
          const before = document.chunkCount
          const otherChunks = yield* allChunks(account, base.id, other.id)
          const counts = new Set<number>()
          const reader = Effect.gen(function* () {
            for (let i = 0; i < 40; i++) {
              const page = yield* client.request(
                "GET",
                `/api/knowledge/${base.id}/chunks?documentId=${document.id}&limit=1`,
                {
                  headers: session(account)
                }
              )
              counts.add(page.body.total)
            }
          })
          const rechunks = Effect.forEach([256, 64, 128], (chunkSize) =>
            client
              .request("POST", `/api/knowledge/${base.id}/documents/${document.id}/rechunk`, {
                headers: session(account),
                body: { chunkSize }
              })
              .pipe(Effect.tap((r) => Effect.sync(() => assert.strictEqual(r.status, 200, r.text))))
          )
          const [, results] = yield* Effect.all([reader, rechunks], { concurrency: 2 })
          const sizes = results.map((r) => r.body.chunkCount)
          const valid = new Set([before, ...sizes])
          for (const count of counts)
            assert.isTrue(valid.has(count), `a reader saw ${count} chunks; valid: ${[...valid]}`)
          assert.deepStrictEqual(results.at(-1)!.body.chunking, { strategy: "auto", chunkSize: 128, chunkOverlap: 0 })
          const after = yield* allChunks(account, base.id, document.id)
          assert.strictEqual(after.length, sizes.at(-1))
          assert.deepStrictEqual(
            after.map((c) => c.index),
            after.map((_, i) => i)
          )
          for (const chunk of after) assert.isAtMost(chunk.tokenCount, 128)
          assert.deepStrictEqual(yield* allChunks(account, base.id, other.id), otherChunks)
          const bad = yield* client.request("POST", `/api/knowledge/${base.id}/documents/${document.id}/rechunk`, {
            headers: session(account),
            body: { chunkOverlap: 100, chunkSize: 64 }
          })
          assert.strictEqual(bad.status, 400)
          assert.deepStrictEqual(bad.body.errors[0].path, ["payload", "chunkOverlap"])
        })
    )
  })

  describe("isolation", () => {
    it.effect("another tenant's base and documents are 404 on every route", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const owner = yield* TestServer.signUp()
        const other = yield* TestServer.signUp()
        const base = yield* createBase(owner)
        const document = (yield* uploadJson(owner, base.id, { filename: "a.txt", content: "Private words." })).body
        const routes: ReadonlyArray<readonly [string, string, unknown?]> = [
          ["GET", `/api/knowledge/${base.id}`],
          ["PUT", `/api/knowledge/${base.id}`, { name: "Mine now" }],
          ["DELETE", `/api/knowledge/${base.id}`],
          ["POST", `/api/knowledge/${base.id}/upload`, { filename: "x.txt", content: "x" }],
          ["GET", `/api/knowledge/${base.id}/documents`],
          ["GET", `/api/knowledge/${base.id}/documents/${document.id}`],
          ["DELETE", `/api/knowledge/${base.id}/documents/${document.id}`],
          ["POST", `/api/knowledge/${base.id}/documents/${document.id}/rechunk`, {}],
          ["GET", `/api/knowledge/${base.id}/chunks`],
          ["POST", `/api/knowledge/${base.id}/search`, { query: "private" }]
        ]
        for (const [method, path, body] of routes) {
          const response = yield* client.request(method, path, {
            headers: session(other),
            ...(body === undefined ? {} : { body })
          })
          assert.strictEqual(response.status, 404, `${method} ${path}: ${response.text}`)
        }
        const listed = yield* client.request("GET", "/api/knowledge", { headers: session(other) })
        assert.strictEqual(listed.body.total, 0)
        // The owner's data is untouched.
        assert.strictEqual((yield* allChunks(owner, base.id)).length, 1)
        const removed = yield* client.request("DELETE", `/api/knowledge/${base.id}/documents/${document.id}`, {
          headers: session(owner)
        })
        assert.strictEqual(removed.status, 204)
        assert.strictEqual((yield* allChunks(owner, base.id)).length, 0)
      })
    )
  })
})
