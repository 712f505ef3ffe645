import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import pg from "pg"
import { request, requestJson, signUpTenant } from "../support/Cluster.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// Distinct texts (the same bytes twice would be a duplicate), each large enough that ingesting them all takes a while.
const textOf = (n: number) =>
  Array.from(
    { length: 9_000 },
    (_, i) => `Document ${n}, sentence ${i}: the lantern ${(i * 7 + n) % 97} lights harbour ${i % 13}.`
  ).join(" ")

describe("ingestion across a crash", () => {
  it.live(
    "documents being ingested when the service is killed (kill -9) end ready after a restart, their chunks written once",
    () =>
      Effect.gen(function* () {
        const env = { DATABASE_URL: yield* TestDatabaseUrl }
        const first = yield* spawnService(env)
        yield* waitReady(first)
        const tenant = yield* Effect.promise(() => signUpTenant(first.baseUrl, "ingest-crash@example.com"))
        const base = yield* Effect.promise(() =>
          requestJson(`${first.baseUrl}/api/knowledge`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "Crash", chunking: { chunkSize: 64, chunkOverlap: 0 } }
          })
        )
        const db = new pg.Client({ connectionString: env.DATABASE_URL })
        yield* Effect.promise(() => db.connect())
        const form = new FormData()
        for (let n = 0; n < 12; n++) form.append("files", new Blob([textOf(n)], { type: "text/plain" }), `doc-${n}.txt`)
        // The upload is not awaited: the service is killed while its documents are being ingested.
        const uploading = fetch(`${first.baseUrl}/api/knowledge/${base.id}/upload`, {
          method: "POST",
          headers: tenant.session,
          body: form
        }).catch(() => undefined)
        yield* Effect.promise(() =>
          eventually(
            async () => {
              const rows = await db.query(
                "SELECT count(*)::int AS n FROM knowledge_documents WHERE knowledge_id = $1 AND status = 'processing'",
                [base.id]
              )
              assert.isAbove(rows.rows[0].n, 0, "a document being ingested")
            },
            { timeoutMs: 30_000, intervalMs: 5 }
          )
        )
        first.child.kill("SIGKILL")
        const killedAt = Date.now()
        yield* Effect.promise(() => first.exited)
        yield* Effect.promise(() => uploading)
        const setup = { tenant, knowledgeId: base.id as string }
        const second = yield* spawnService(env)
        yield* waitReady(second)
        const documents = yield* Effect.promise(() =>
          eventually(
            async () => {
              const listed = await request(`${second.baseUrl}/api/knowledge/${setup.knowledgeId}/documents`, {
                headers: setup.tenant.session
              })
              const data = listed.body?.data as Array<any> | undefined
              return defined(
                "every document to be ingested",
                data !== undefined && data.length > 0 && data.every((d) => d.status !== "processing") ? data : undefined
              )
            },
            { timeoutMs: 120_000, intervalMs: 200 }
          )
        )
        for (const document of documents) {
          assert.strictEqual(document.status, "ready", JSON.stringify(document))
          const page = yield* Effect.promise(() =>
            request(`${second.baseUrl}/api/knowledge/${setup.knowledgeId}/chunks?documentId=${document.id}&limit=1`, {
              headers: setup.tenant.session
            })
          )
          // Exactly the chunks the document counts: none twice, none lost.
          assert.strictEqual(page.body.total, document.chunkCount, document.filename)
          assert.isAbove(document.chunkCount, 100)
        }
        // Some were ingested by the restarted service, after the kill.
        assert.isTrue(
          documents.some((document) => Date.parse(document.updatedAt) > killedAt),
          JSON.stringify(documents.map((d) => d.updatedAt))
        )
        yield* Effect.promise(() => db.end())
        second.child.kill("SIGTERM")
        yield* Effect.promise(() => second.exited)
      }),
    240_000
  )
})
