import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Crypto from "node:crypto"
import { newId } from "../../src/Domain/Ids.ts"
import { searchText } from "../../src/Knowledge/Segment.ts"
import { seedKnowledge } from "../support/Knowledge.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// Whether a query word selects candidates or only ranks them depends on how
// common it is; that must be judged on the searching tenant's own chunks.
// Statistics are read at every search here (no cache), so a search sees
// another tenant's upload at once if it can see it at all.

const search = (account: Account, knowledgeId: string, query: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const found = yield* client.request("POST", `/api/knowledge/${knowledgeId}/search`, {
      headers: TestServer.bearer(account.token),
      body: { query, topK: 50 }
    })
    assert.strictEqual(found.status, 200, found.text)
    return found.body.data as ReadonlyArray<{ id: string; documentId: string; content: string; score: number }>
  })

// A term in every chunk of `documents` documents of `chunksPerDocument`
// chunks, among filler words, written as ingestion writes chunks, a document
// per statement.
const seedMany = (account: Account, term: string, documents: number, chunksPerDocument: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const knowledgeId = newId()
    yield* sql`INSERT INTO knowledge_bases (id, tenant_id, name, language, chunk_strategy, chunk_size, chunk_overlap)
               VALUES (${knowledgeId}, ${account.tenantId}, 'Many', 'simple', 'auto', 512, 64)`
    const filler = (i: number) => Array.from({ length: 12 }, (_, j) => `w${(i * 7 + j * 13) % 997}`).join(" ")
    for (let document = 0; document < documents; document++) {
      const documentId = newId()
      const contents = Array.from(
        { length: chunksPerDocument },
        (_, i) => `${filler(document * chunksPerDocument + i)} ${term}.`
      )
      yield* sql`
        INSERT INTO knowledge_documents (id, tenant_id, knowledge_id, filename, content_type, bytes, sha256, status,
          chunk_strategy, chunk_size, chunk_overlap, chunk_count)
        VALUES (${documentId}, ${account.tenantId}, ${knowledgeId}, ${`many-${document}.txt`}, 'text/plain', 0,
          ${Crypto.randomBytes(32).toString("hex")}, 'ready', 'auto', 512, 64, ${contents.length})`
      yield* sql`
        INSERT INTO knowledge_chunks (id, tenant_id, knowledge_id, document_id, index, content, token_count,
          start_offset, end_offset, search_vector)
        SELECT c.id, ${account.tenantId}, ${knowledgeId}, ${documentId}, c.index, c.content, 10, 0, length(c.content),
               to_tsvector('simple', knowledge_unaccent(c.indexed))
        FROM unnest(${contents.map(() => newId())}::text[], ${contents.map((_, i) => i)}::int[], ${contents}::text[],
                    ${contents.map(searchText)}::text[]) AS c (id, index, content, indexed)`
    }
    return knowledgeId
  })

layer(TestServer.layer({ knowledgeSearchStatsTtl: Duration.zero }), { excludeTestServices: true })(
  "knowledge search statistics",
  (it) => {
    describe("per tenant", () => {
      it.effect(
        "another tenant making a word common changes neither this tenant's candidates nor its results and scores",
        () =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            const tenantB = yield* TestServer.signUp()
            const { knowledgeId: baseB, documents } = yield* seedKnowledge(tenantB, {
              name: "B",
              documents: [
                { filename: "term-only.txt", text: "The zephyr rattled the shutters all night long." },
                { filename: "other-only.txt", text: "A quokka smiled at the camera by the lake." },
                { filename: "both.txt", text: "The zephyr carried the quokka's scent across the lake." },
                { filename: "neither.txt", text: "Harbour lanterns glow over the water at dusk." }
              ]
            })
            const queries = ["zephyr quokka", "zephyr", "zephyr lanterns", "quokka"]
            const before = yield* Effect.forEach(queries, (query) => search(tenantB, baseB, query))
            // Both words select candidates: the chunk with only "zephyr" is found by the first query.
            assert.deepStrictEqual(
              new Set(before[0]!.map((hit) => hit.documentId)),
              new Set([documents["term-only.txt"], documents["other-only.txt"], documents["both.txt"]])
            )

            // Tenant A uploads 21,000 chunks, every one with "zephyr", and the
            // planner's statistics of the whole table are brought up to date.
            const tenantA = yield* TestServer.signUp()
            const baseA = yield* seedMany(tenantA, "zephyr", 210, 100)
            yield* sql`ANALYZE knowledge_chunks`

            const after = yield* Effect.forEach(queries, (query) => search(tenantB, baseB, query))
            assert.deepStrictEqual(after, before)

            // For A itself "zephyr" is common now: it only ranks, so a query with
            // a word none of A's chunks has finds nothing, and alone it still
            // finds A's chunks (a query of common words only needs them all).
            assert.deepStrictEqual(yield* search(tenantA, baseA, "zephyr quokka"), [])
            assert.strictEqual((yield* search(tenantA, baseA, "zephyr")).length, 50)
          }),
        { timeout: 120_000 }
      )
    })
  }
)
