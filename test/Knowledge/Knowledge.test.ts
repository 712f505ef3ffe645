import { assert, describe, layer } from "@effect/vitest"
import { Document as DocxDocument, HeadingLevel, Packer, Paragraph } from "docx"
import { Duration, Effect } from "effect"
import { PDFDocument, rgb, StandardFonts } from "pdf-lib"
import type { DocumentId, KnowledgeId } from "../../src/Domain/Ids.ts"
import {
  BadRequest,
  DuplicateDocument,
  NotFound,
  PayloadTooLarge,
  UnsupportedMediaType
} from "../../src/Domain/Problems.ts"
import type { Chunk, KnowledgeBase, UploadJson } from "../../src/Knowledge/Api.ts"
import { countTokens } from "../../src/Models/Tokens.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, type ApiClient, TestClient } from "../support/TestServer.ts"

const maxUploadBytes = 256 * 1024

const session = (account: Account) => TestServer.bearer(account.token)

/** A new account and the typed client of its session. */
const signedUp = Effect.gen(function* () {
  const account = yield* TestServer.signUp()
  return { account, api: yield* TestServer.apiClient(account.token) }
})

const createBase = (api: ApiClient, payload: Partial<typeof KnowledgeBase.jsonCreate.Type> = {}) =>
  api.knowledge.create({ payload: { name: "Docs", ...payload } })

const upload = (
  api: ApiClient,
  knowledgeId: KnowledgeId,
  payload: UploadJson,
  query: { readonly duplicates?: "reject" | "allow" } = {}
) => api.knowledge.upload({ params: { id: knowledgeId }, query, payload })

const uploadForm = (api: ApiClient, knowledgeId: KnowledgeId, form: FormData) =>
  api.knowledge.upload({ params: { id: knowledgeId }, query: {}, payload: form })

/** A JSON upload ingested at once: the 201 with its document, not the 202 of one still processing. */
const uploadJson = (
  api: ApiClient,
  knowledgeId: KnowledgeId,
  payload: UploadJson,
  query?: { readonly duplicates?: "reject" | "allow" }
) =>
  Effect.flatMap(upload(api, knowledgeId, payload, query), (uploaded) =>
    "data" in uploaded
      ? Effect.die(new Error(`202 where 201 was expected: ${JSON.stringify(uploaded)}`))
      : Effect.succeed(uploaded)
  )

const formOf = (
  files: ReadonlyArray<{ name: string; type: string; bytes: Uint8Array }>,
  fields: Record<string, string> = {}
) => {
  const form = new FormData()
  for (const file of files) form.append("files", new Blob([file.bytes], { type: file.type }), file.name)
  for (const [name, value] of Object.entries(fields)) form.append(name, value)
  return form
}

/** Polls the document until it is no longer processing. */
const settled = (api: ApiClient, knowledgeId: KnowledgeId, documentId: DocumentId) =>
  eventually(
    Effect.map(api.knowledge.document({ params: { id: knowledgeId, documentId } }), (document) => {
      assert.notStrictEqual(document.status, "processing", `document ${documentId} still processing`)
      return document
    }),
    { timeoutMs: 30_000 }
  )

const allChunks = (api: ApiClient, knowledgeId: KnowledgeId, documentId?: DocumentId) =>
  Effect.gen(function* () {
    const chunks: Array<Chunk> = []
    let cursor: string | null = null
    do {
      const page: { readonly data: ReadonlyArray<Chunk>; readonly nextCursor: string | null } =
        yield* api.knowledge.chunks({
          params: { id: knowledgeId },
          query: {
            limit: 7,
            ...(documentId === undefined ? {} : { documentId }),
            ...(cursor === null ? {} : { cursor })
          }
        })
      chunks.push(...page.data)
      cursor = page.nextCursor
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

// A long wait makes a small upload's 201 certain on a loaded machine; the 202 of a shorter one is tested below.
layer(TestServer.layer({ maxUploadBytes, uploadReadyWait: Duration.minutes(1) }), { excludeTestServices: true })(
  "knowledge bases",
  (it) => {
    describe("bases", () => {
      it.effect("create with defaults, read, update, list in pages, delete; bad fields are 400s naming them", () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const { account, api } = yield* signedUp
          const base = yield* createBase(api, { description: "Product docs" })
          assert.deepStrictEqual(base.chunking, { strategy: "auto", chunkSize: 512, chunkOverlap: 64 })
          assert.strictEqual(base.language, "simple")
          assert.deepStrictEqual([base.documentCount, base.chunkCount, base.tokenCount], [0, 0, 0])
          const english = yield* createBase(api, {
            name: "English",
            language: "english",
            chunking: { chunkSize: 256 }
          })
          assert.deepStrictEqual(english.chunking, { strategy: "auto", chunkSize: 256, chunkOverlap: 64 })

          // Raw: bodies the typed client would refuse to encode.
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

          const updated = yield* api.knowledge.update({
            params: { id: base.id },
            payload: { name: "Renamed", chunking: { strategy: "sentence", chunkOverlap: 0 } }
          })
          assert.deepStrictEqual([updated.name, updated.description], ["Renamed", "Product docs"])
          assert.deepStrictEqual(updated.chunking, { strategy: "sentence", chunkSize: 512, chunkOverlap: 0 })

          const first = yield* api.knowledge.list({ query: { limit: 1 } })
          assert.deepStrictEqual([first.total, first.data.length, first.data[0]!.id], [2, 1, base.id])
          const second = yield* api.knowledge.list({ query: { limit: 1, cursor: first.nextCursor! } })
          assert.deepStrictEqual([second.data[0]!.id, second.nextCursor], [english.id, null])

          const [, removed] = yield* api.knowledge.remove({
            params: { id: english.id },
            responseMode: "decoded-and-response"
          })
          assert.strictEqual(removed.status, 204)
          assert.instanceOf(yield* Effect.flip(api.knowledge.get({ params: { id: english.id } })), NotFound)
        })
      )
    })

    describe("uploads", () => {
      it.effect(
        "text, Markdown, HTML, JSON and CSV through JSON uploads: ready at once, chunked, with heading paths",
        () =>
          Effect.gen(function* () {
            const { api } = yield* signedUp
            const base = yield* createBase(api)
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
              const uploaded = yield* uploadJson(api, base.id, {
                filename,
                content,
                ...(contentType ? { contentType } : {})
              })
              assert.strictEqual(uploaded.status, "ready", filename)
              assert.strictEqual(uploaded.contentType, expectedType, filename)
              assert.isAbove(uploaded.chunkCount, 0, filename)
              assert.match(uploaded.sha256, /^[0-9a-f]{64}$/)
            }
            const documents = yield* api.knowledge.documents({ params: { id: base.id }, query: {} })
            assert.strictEqual(documents.total, 5)
            const guide = documents.data.find((d) => d.filename === "guide.md")!
            const chunks = yield* allChunks(api, base.id, guide.id)
            assert.deepStrictEqual(
              chunks.map((c) => c.headingPath),
              [["Install"], ["Install", "Linux"], ["Install", "macOS"]]
            )
            assert.include(chunks[1]!.content, "Unpack the archive")
            for (const chunk of chunks)
              assert.strictEqual(markdown.slice(chunk.startOffset, chunk.endOffset), chunk.content)
            const refreshed = yield* api.knowledge.get({ params: { id: base.id } })
            assert.strictEqual(refreshed.documentCount, 5)
            assert.strictEqual(refreshed.chunkCount, (yield* allChunks(api, base.id)).length)
          })
      )

      it.effect(
        "a real PDF (pages on chunks), a real DOCX (headings) and a scanned PDF (failed with no_text) through multipart",
        () =>
          Effect.gen(function* () {
            const { api } = yield* signedUp
            const base = yield* createBase(api)
            const sentences = (page: string) =>
              Array.from(
                { length: 8 },
                (_, i) => `${page} page, sentence ${i + 1}, is about lanterns and harbours.`
              ).join(" ")
            const pdf = yield* Effect.promise(() => pdfOf([sentences("First"), sentences("Second")]))
            const docx = yield* Effect.promise(docxOf)
            const scan = yield* Effect.promise(scannedPdf)
            const uploaded = yield* uploadForm(
              api,
              base.id,
              formOf(
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
            )
            // The 202 of documents still processing, not the 201 of one.
            assert.property(uploaded, "data", JSON.stringify(uploaded))
            const processing = "data" in uploaded ? uploaded.data : []
            assert.strictEqual(processing.length, 3)
            const [manual, guide, scanned] = yield* Effect.forEach(processing, (d) => settled(api, base.id, d.id))
            assert.strictEqual(manual!.status, "ready", JSON.stringify(manual))
            assert.deepStrictEqual(manual!.chunking, { strategy: "auto", chunkSize: 64, chunkOverlap: 0 })
            const manualChunks = yield* allChunks(api, base.id, manual!.id)
            assert.isAbove(manualChunks.length, 2)
            assert.strictEqual(manualChunks[0]!.page, 1)
            const pages = manualChunks.map((chunk) => chunk.page)
            assert.deepStrictEqual(pages, [...pages].sort())
            // A chunk that starts on the second page says so.
            const second = manualChunks.find((chunk) => chunk.content.startsWith("Second page"))
            assert.strictEqual(
              second?.page,
              2,
              JSON.stringify(manualChunks.map((c) => [c.page, c.content.slice(0, 30)]))
            )
            for (const chunk of manualChunks) assert.isAtMost(chunk.tokenCount, 64)
            assert.strictEqual(guide!.status, "ready", JSON.stringify(guide))
            const guideChunks = yield* allChunks(api, base.id, guide!.id)
            assert.deepStrictEqual(guideChunks.at(-1)!.headingPath, ["Install", "Linux"])
            assert.include(guideChunks.at(-1)!.content, "systemd unit")
            assert.strictEqual(scanned!.status, "failed")
            assert.strictEqual(scanned!.error?.code, "no_text")
            assert.strictEqual(scanned!.chunkCount, 0)
            // Form fields are checked like JSON ones.
            const bad = yield* Effect.flip(
              uploadForm(
                api,
                base.id,
                formOf([{ name: "x.txt", type: "text/plain", bytes: Buffer.from("x") }], {
                  strategy: "words",
                  chunkSize: "abc"
                })
              )
            )
            assert.instanceOf(bad, BadRequest)
            assert.deepStrictEqual(
              bad.errors?.map((e) => e.path),
              [["payload", "chunkSize"]]
            )
            const badStrategy = yield* Effect.flip(
              uploadForm(
                api,
                base.id,
                formOf([{ name: "x.txt", type: "text/plain", bytes: Buffer.from("x") }], { strategy: "words" })
              )
            )
            assert.instanceOf(badStrategy, BadRequest)
            assert.deepStrictEqual(
              badStrategy.errors?.map((e) => e.path),
              [["payload", "strategy"]]
            )
          })
      )

      it.effect(
        "413 beyond MAX_UPLOAD_BYTES, 415 for unsupported types, 409 for the same bytes unless duplicates=allow",
        () =>
          Effect.gen(function* () {
            const { api } = yield* signedUp
            const base = yield* createBase(api)
            const big = "lantern ".repeat(Math.ceil((maxUploadBytes + 10) / 8))
            const tooLarge = yield* Effect.flip(upload(api, base.id, { filename: "big.txt", content: big }))
            assert.instanceOf(tooLarge, PayloadTooLarge)
            assert.strictEqual(tooLarge.status, 413)
            assert.strictEqual(tooLarge.limit, maxUploadBytes)
            // Past the multipart limit of one file, or the upload route's body limit, the request is refused
            // before the route runs, with the same declared problem naming the limit that was passed.
            const tooLargeForm = yield* Effect.flip(
              uploadForm(api, base.id, formOf([{ name: "big.txt", type: "text/plain", bytes: Buffer.from(big) }]))
            )
            assert.instanceOf(tooLargeForm, PayloadTooLarge)
            assert.strictEqual(tooLargeForm.limit, maxUploadBytes)
            const wayTooLarge = yield* Effect.flip(
              upload(api, base.id, { filename: "huge.txt", content: big.repeat(5) })
            )
            assert.instanceOf(wayTooLarge, PayloadTooLarge)
            // The upload route's body limit: the file's room in base64 and multipart's headers, or
            // MAX_BODY_BYTES (1 MiB) where that is larger, as here.
            assert.strictEqual(
              wayTooLarge.limit,
              Math.max(1024 * 1024, Math.ceil((maxUploadBytes * 4) / 3) + 64 * 1024)
            )

            const png = Buffer.from("89504e470d0a1a0a0000000d49484452", "hex")
            const unsupported = yield* Effect.flip(
              upload(api, base.id, { filename: "logo.png", content: png.toString("base64"), encoding: "base64" })
            )
            assert.instanceOf(unsupported, UnsupportedMediaType)
            assert.strictEqual(unsupported.status, 415)
            const declared = yield* Effect.flip(
              upload(api, base.id, { filename: "sheet.xlsx", contentType: "application/vnd.ms-excel", content: "a,b" })
            )
            assert.instanceOf(declared, UnsupportedMediaType)
            assert.strictEqual(declared.status, 415)

            const first = yield* uploadJson(api, base.id, { filename: "a.txt", content: "The same words." })
            const again = yield* Effect.flip(upload(api, base.id, { filename: "b.txt", content: "The same words." }))
            assert.instanceOf(again, DuplicateDocument)
            assert.strictEqual(again.status, 409)
            assert.strictEqual(again.documentId, first.id)
            yield* uploadJson(api, base.id, { filename: "b.txt", content: "The same words." }, { duplicates: "allow" })
            // Another base is another set of documents.
            const other = yield* createBase(api, { name: "Other" })
            yield* uploadJson(api, other.id, { filename: "a.txt", content: "The same words." })

            const empty = yield* uploadJson(api, base.id, { filename: "empty.txt", content: "   \n" })
            assert.deepStrictEqual([empty.status, empty.error?.code, empty.chunkCount], ["failed", "no_text", 0])
            const badBase64 = yield* Effect.flip(
              upload(api, base.id, { filename: "x.bin", content: "not base64!", encoding: "base64" })
            )
            assert.instanceOf(badBase64, BadRequest)
            assert.deepStrictEqual(badBase64.errors?.[0]?.path, ["payload", "content"])
            const badChunking = yield* Effect.flip(
              upload(api, base.id, { filename: "c.txt", content: "words", chunking: { chunkSize: 5000 } })
            )
            assert.instanceOf(badChunking, BadRequest)
            assert.deepStrictEqual(badChunking.errors?.[0]?.path, ["payload", "chunking", "chunkSize"])
          })
      )

      it.effect("Chinese and Japanese text is split into many chunks, each within chunkSize, offsets exact", () =>
        Effect.gen(function* () {
          const { api } = yield* signedUp
          const base = yield* createBase(api, { chunking: { chunkSize: 64, chunkOverlap: 8 } })
          const text = Array.from({ length: 60 }, (_, i) =>
            i % 2 === 0 ? "知识库把文档切成小块，以便检索和回答问题。" : "東京駅から新幹線で大阪まで約二時間半です。"
          ).join("")
          const uploaded = yield* uploadJson(api, base.id, { filename: "cjk.txt", content: text })
          const chunks = yield* allChunks(api, base.id, uploaded.id)
          assert.isAbove(chunks.length, 10)
          for (const chunk of chunks) {
            assert.isAtMost(countTokens(chunk.content), 64)
            assert.strictEqual(chunk.tokenCount, countTokens(chunk.content))
            assert.strictEqual(text.slice(chunk.startOffset, chunk.endOffset), chunk.content)
          }
          assert.strictEqual(chunks[0]!.startOffset, 0)
          assert.strictEqual(chunks.at(-1)!.endOffset, text.length)
        })
      )
    })

    describe("rechunk", () => {
      it.effect(
        "replaces one document's chunks at once: concurrent readers see the old set or the new one, never a mix",
        () =>
          Effect.gen(function* () {
            const { api } = yield* signedUp
            const base = yield* createBase(api, { chunking: { chunkSize: 64, chunkOverlap: 0 } })
            const text = Array.from(
              { length: 200 },
              (_, i) => `Sentence number ${i} talks about lanterns and harbours.`
            ).join(" ")
            const document = yield* uploadJson(api, base.id, { filename: "long.txt", content: text })
            const other = yield* uploadJson(api, base.id, { filename: "other.txt", content: "Untouched." })
            const before = document.chunkCount
            const otherChunks = yield* allChunks(api, base.id, other.id)
            const counts = new Set<number>()
            const reader = Effect.gen(function* () {
              for (let i = 0; i < 40; i++) {
                const page = yield* api.knowledge.chunks({
                  params: { id: base.id },
                  query: { documentId: document.id, limit: 1 }
                })
                counts.add(page.total)
              }
            })
            const rechunks = Effect.forEach([256, 64, 128], (chunkSize) =>
              api.knowledge.rechunk({ params: { id: base.id, documentId: document.id }, payload: { chunkSize } })
            )
            const [, results] = yield* Effect.all([reader, rechunks], { concurrency: 2 })
            const sizes = results.map((r) => r.chunkCount)
            const valid = new Set([before, ...sizes])
            for (const count of counts)
              assert.isTrue(valid.has(count), `a reader saw ${count} chunks; valid: ${[...valid]}`)
            assert.deepStrictEqual(results.at(-1)!.chunking, { strategy: "auto", chunkSize: 128, chunkOverlap: 0 })
            const after = yield* allChunks(api, base.id, document.id)
            assert.strictEqual(after.length, sizes.at(-1))
            assert.deepStrictEqual(
              after.map((c) => c.index),
              after.map((_, i) => i)
            )
            for (const chunk of after) assert.isAtMost(chunk.tokenCount, 128)
            assert.deepStrictEqual(yield* allChunks(api, base.id, other.id), otherChunks)
            const bad = yield* Effect.flip(
              api.knowledge.rechunk({
                params: { id: base.id, documentId: document.id },
                payload: { chunkOverlap: 100, chunkSize: 64 }
              })
            )
            assert.instanceOf(bad, BadRequest)
            assert.deepStrictEqual(bad.errors?.[0]?.path, ["payload", "chunkOverlap"])
          })
      )
    })

    describe("isolation", () => {
      it.effect("another tenant's base and documents are 404 on every route", () =>
        Effect.gen(function* () {
          const owner = yield* signedUp
          const other = yield* signedUp
          const theirs = other.api.knowledge
          const base = yield* createBase(owner.api)
          const document = yield* uploadJson(owner.api, base.id, { filename: "a.txt", content: "Private words." })
          const id = base.id
          const documentId = document.id
          // Each route's refusal, flipped into the value to check.
          const refusals = [
            ["get", Effect.flip(theirs.get({ params: { id } }))],
            ["update", Effect.flip(theirs.update({ params: { id }, payload: { name: "Mine now" } }))],
            ["remove", Effect.flip(theirs.remove({ params: { id } }))],
            ["upload", Effect.flip(upload(other.api, id, { filename: "x.txt", content: "x" }))],
            ["documents", Effect.flip(theirs.documents({ params: { id }, query: {} }))],
            ["document", Effect.flip(theirs.document({ params: { id, documentId } }))],
            ["removeDocument", Effect.flip(theirs.removeDocument({ params: { id, documentId } }))],
            ["rechunk", Effect.flip(theirs.rechunk({ params: { id, documentId }, payload: {} }))],
            ["chunks", Effect.flip(theirs.chunks({ params: { id }, query: {} }))],
            ["search", Effect.flip(other.api.knowledgeSearch.search({ params: { id }, payload: { query: "private" } }))]
          ] as const
          for (const [route, refusal] of refusals) {
            const refused = yield* refusal
            assert.instanceOf(refused, NotFound, route)
            assert.strictEqual(refused.status, 404, route)
          }
          assert.strictEqual((yield* theirs.list({ query: {} })).total, 0)
          // The owner's data is untouched.
          assert.strictEqual((yield* allChunks(owner.api, base.id)).length, 1)
          const [, removed] = yield* owner.api.knowledge.removeDocument({
            params: { id, documentId },
            responseMode: "decoded-and-response"
          })
          assert.strictEqual(removed.status, 204)
          assert.strictEqual((yield* allChunks(owner.api, base.id)).length, 0)
        })
      )
    })
  }
)

layer(TestServer.layer({ uploadReadyWait: Duration.zero }), { excludeTestServices: true })(
  "an upload with UPLOAD_READY_WAIT at zero",
  (it) => {
    it.effect("answers 202 at once with the document, which then becomes ready", () =>
      Effect.gen(function* () {
        const { api } = yield* signedUp
        const base = yield* createBase(api)
        const uploaded = yield* upload(api, base.id, { filename: "notes.txt", content: "A lantern lights the path." })
        assert.property(uploaded, "data", JSON.stringify(uploaded))
        const processing = "data" in uploaded ? uploaded.data : []
        assert.strictEqual(processing.length, 1)
        const ready = yield* settled(api, base.id, processing[0]!.id)
        assert.strictEqual(ready.status, "ready", JSON.stringify(ready))
        assert.strictEqual(ready.chunkCount, 1)
      })
    )
  }
)
