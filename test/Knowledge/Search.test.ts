import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Fs from "node:fs"
import { seedKnowledge } from "../support/Knowledge.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

interface Labelled {
  readonly documents: ReadonlyArray<{ readonly filename: string; readonly text: string }>
  readonly queries: ReadonlyArray<{ readonly query: string; readonly relevant: ReadonlyArray<string> }>
}
const labelled: Labelled = JSON.parse(Fs.readFileSync(new URL("./fixtures/relevance.json", import.meta.url), "utf8"))

const search = (account: Account, knowledgeId: string, body: unknown) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/knowledge/${knowledgeId}/search`, { headers: TestServer.bearer(account.token), body })
  )

layer(TestServer.layer(), { excludeTestServices: true })("knowledge search", (it) => {
  describe("relevance", () => {
    it.effect("the labelled set: recall@5 and the first hit, over English, accented and CJK queries", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const { documents, knowledgeId } = yield* seedKnowledge(account, {
          name: "Labelled",
          documents: labelled.documents
        })
        const filenameOf = new Map(Object.entries(documents).map(([filename, id]) => [id, filename]))
        let recall = 0
        let firstHits = 0
        const misses: Array<string> = []
        for (const { query, relevant } of labelled.queries) {
          const found = yield* search(account, knowledgeId, { query, topK: 5 })
          assert.strictEqual(found.status, 200, found.text)
          const names = found.body.data.map((hit: any) => filenameOf.get(hit.documentId))
          const got = relevant.filter((name) => names.includes(name)).length
          recall += got / relevant.length
          if (relevant.includes(names[0])) firstHits++
          else misses.push(`${query} -> ${names.join(", ")}`)
        }
        const n = labelled.queries.length
        console.log(
          `knowledge search on the labelled set (${labelled.documents.length} documents, ${n} queries): ` +
            `recall@5 ${(recall / n).toFixed(3)}, first hit relevant ${firstHits}/${n}` +
            (misses.length === 0 ? "" : `; first hit missed: ${misses.join(" | ")}`)
        )
        assert.isAtLeast(recall / n, 0.95)
        assert.isAtLeast(firstHits / n, 0.9)
      })
    )

    it.effect("accents are ignored both ways, CJK is split into words, and any word of the query matches", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const { documents, knowledgeId } = yield* seedKnowledge(account, {
          name: "Words",
          documents: labelled.documents
        })
        const top = (query: string) =>
          search(account, knowledgeId, { query }).pipe(Effect.map((found) => found.body.data[0]?.documentId))
        assert.strictEqual(yield* top("résumé"), documents["resume-fr.txt"])
        assert.strictEqual(yield* top("RESUME"), documents["resume-fr.txt"])
        assert.strictEqual(yield* top("Noël bûche"), documents["noel-fr.txt"])
        assert.strictEqual(yield* top("strasse"), documents["strasse-de.txt"])
        // A CJK word inside a sentence without spaces, and one of many words of a sentence.
        assert.strictEqual(yield* top("发票"), documents["refund-zh.txt"])
        assert.strictEqual(yield* top("豚骨スープ"), documents["ramen-ja.txt"])
        assert.strictEqual(yield* top("zebra quantum tomatoes"), documents["gardening.txt"])
        // Quotes, backslashes and tsquery operators in a query are words like any other.
        for (const query of ["it's O'Brien \\ back\\slash", "a & b | !c <-> (d)", "'quoted'", "\\"]) {
          const odd = yield* search(account, knowledgeId, { query })
          assert.strictEqual(odd.status, 200, `${query}: ${odd.text}`)
        }
        // Nothing searchable: an empty answer, not an error.
        const nothing = yield* search(account, knowledgeId, { query: "!!! ??? ..." })
        assert.strictEqual(nothing.status, 200, nothing.text)
        assert.deepStrictEqual(nothing.body.data, [])
      })
    )

    it.effect("hits carry the chunk's fields and a score from 0 to 1, best first", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const { documents, knowledgeId } = yield* seedKnowledge(account, {
          name: "Fields",
          documents: labelled.documents
        })
        const found = yield* search(account, knowledgeId, { query: "install service", topK: 50 })
        assert.isAbove(found.body.data.length, 3)
        const hit = found.body.data[0]
        assert.deepStrictEqual(Object.keys(hit).sort(), [
          "content",
          "documentId",
          "endOffset",
          "headingPath",
          "id",
          "index",
          "knowledgeId",
          "page",
          "score",
          "startOffset",
          "tokenCount"
        ])
        assert.strictEqual(hit.knowledgeId, knowledgeId)
        const scores: Array<number> = found.body.data.map((h: any) => h.score)
        assert.deepStrictEqual(
          scores,
          [...scores].sort((a, b) => b - a)
        )
        for (const score of scores) assert.isTrue(score > 0 && score < 1, String(score))
        const linux = found.body.data.find((h: any) => h.documentId === documents["install-linux.md"])
        assert.deepStrictEqual(linux.headingPath, ["Installing on Linux"])
        const text = labelled.documents.find((d) => d.filename === "install-linux.md")!.text
        assert.strictEqual(text.slice(linux.startOffset, linux.endOffset), linux.content)
      })
    )
  })

  describe("limits and isolation", () => {
    it.effect("topK defaults to 5 and is bounded; a bad body is a 400 naming the field", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const many = Array.from({ length: 60 }, (_, i) => ({
          filename: `n${i}.txt`,
          text: `Note ${i} about the harbour lantern.`
        }))
        const { knowledgeId } = yield* seedKnowledge(account, { name: "Many", documents: many })
        assert.strictEqual((yield* search(account, knowledgeId, { query: "lantern" })).body.data.length, 5)
        assert.strictEqual((yield* search(account, knowledgeId, { query: "lantern", topK: 50 })).body.data.length, 50)
        const cases: ReadonlyArray<readonly [unknown, string]> = [
          [{ query: "lantern", topK: 0 }, "topK"],
          [{ query: "lantern", topK: 51 }, "topK"],
          [{ query: "lantern", topK: 2.5 }, "topK"],
          [{ query: "" }, "query"],
          [{ query: "x".repeat(2_001) }, "query"],
          [{}, "query"]
        ]
        for (const [body, field] of cases) {
          const bad = yield* search(account, knowledgeId, body)
          assert.strictEqual(bad.status, 400, JSON.stringify(body))
          assert.deepStrictEqual(bad.body.errors[0].path, ["payload", field], JSON.stringify(body))
        }
      })
    )

    it.effect("another tenant's base is a 404, and only ready documents are searched", () =>
      Effect.gen(function* () {
        const owner = yield* TestServer.signUp()
        const other = yield* TestServer.signUp()
        const { knowledgeId } = yield* seedKnowledge(owner, {
          name: "Mine",
          documents: [
            { filename: "ready.txt", text: "The aurora glows green over the fjord." },
            { filename: "pending.txt", text: "The aurora is still being indexed here.", status: "processing" },
            { filename: "broken.txt", text: "The aurora document that failed.", status: "failed" }
          ]
        })
        const foreign = yield* search(other, knowledgeId, { query: "aurora" })
        assert.strictEqual(foreign.status, 404, foreign.text)
        const unknown = yield* search(owner, "00000000-0000-7000-8000-000000000000", { query: "aurora" })
        assert.strictEqual(unknown.status, 404)
        const found = yield* search(owner, knowledgeId, { query: "aurora" })
        assert.strictEqual(found.body.data.length, 1)
        assert.include(found.body.data[0].content, "fjord")
      })
    )
  })

  it.effect("the full-text index keeps a short list of pending entries, which every search reads", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const [index] = yield* sql<{ readonly options: ReadonlyArray<string> | null }>`
        SELECT reloptions AS options FROM pg_class WHERE relname = 'knowledge_chunks_search_idx'`
      assert.deepStrictEqual(index?.options, ["gin_pending_list_limit=256"])
    })
  )
})
