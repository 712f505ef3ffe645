import { assert, describe, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { SqlClient } from "effect/sql"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// Distinct texts, each long enough that its extraction and split take a while.
const textOf = (tenant: string, n: number) =>
  Array.from({ length: 5_000 }, (_, i) => `${tenant} document ${n}, sentence ${i}: the lantern ${(i * 7 + n) % 97} lights harbour ${i % 13}.`)
    .join(" ")

const createBase = (account: Account) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/knowledge", { headers: TestServer.bearer(account.token), body: { name: "Slots" } })).pipe(
      Effect.map((response) => response.body.id as string)
    )

const upload = (account: Account, knowledgeId: string, filename: string, content: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/knowledge/${knowledgeId}/upload`, {
      headers: TestServer.bearer(account.token),
      body: { filename, content }
    })).pipe(Effect.map((response) => {
      // Ready within the upload's short wait (201), or still processing behind the tenant's other documents (202).
      if (response.status === 201) return response.body.id as string
      if (response.status === 202) return response.body.data[0].id as string
      throw new Error(`upload ${filename}: ${response.status} ${response.text}`)
    }))

layer(TestServer.layer({ extractionConcurrency: 3, extractionConcurrencyPerTenant: 1 }), { excludeTestServices: true })(
  "ingestion places",
  (it) => {
    describe("per tenant, in the database", () => {
      it.effect("one tenant's documents are extracted one at a time (EXTRACTION_CONCURRENCY_PER_TENANT=1) while another tenant's goes at once", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const busy = yield* TestServer.signUp()
          const other = yield* TestServer.signUp()
          const busyBase = yield* createBase(busy)
          const otherBase = yield* createBase(other)
          // The most documents each tenant held places for at once, read every few milliseconds.
          const most = new Map<string, number>()
          const sampler = yield* Effect.forkChild(Effect.forever(Effect.gen(function*() {
            const rows = yield* sql<{ tenantId: string; holding: number }>`
              SELECT tenant_id, count(*)::int AS holding FROM knowledge_documents
              WHERE status = 'processing' AND extraction_slot_at IS NOT NULL GROUP BY tenant_id`
            for (const row of rows) most.set(row.tenantId, Math.max(most.get(row.tenantId) ?? 0, row.holding))
            yield* Effect.sleep("5 millis")
          })))
          const busyUploads = yield* Effect.forkChild(Effect.forEach(
            Array.from({ length: 5 }, (_, n) => n),
            (n) => upload(busy, busyBase, `busy-${n}.txt`, textOf("busy", n)),
            { concurrency: "unbounded" }
          ))
          // Once the busy tenant's documents hold its place and wait for it.
          yield* TestServer.waitFor("the busy tenant's documents to hold a place", Effect.sync(() => most.get(busy.tenantId)), 20_000)
          const otherId = yield* upload(other, otherBase, "other.txt", textOf("other", 0))
          const busyIds = yield* Fiber.join(busyUploads)
          yield* TestServer.waitFor(
            "every document to be ready",
            sql<{ waiting: number }>`SELECT count(*)::int AS waiting FROM knowledge_documents WHERE status <> 'ready'`.pipe(
              Effect.map((rows) => rows[0]!.waiting === 0 ? true : undefined),
              Effect.orDie
            ),
            60_000
          )
          yield* Fiber.interrupt(sampler)
          assert.strictEqual(most.get(busy.tenantId), 1)
          assert.strictEqual(most.get(other.tenantId) ?? 1, 1)
          const finished = yield* sql<{ id: string; updatedAt: Date }>`
            SELECT id, updated_at FROM knowledge_documents WHERE id IN ${sql.in([...busyIds, otherId])}`
          const at = new Map(finished.map((row) => [row.id, row.updatedAt.getTime()]))
          // The other tenant did not wait for the busy one's queue to drain.
          assert.isBelow(at.get(otherId)!, Math.max(...busyIds.map((id) => at.get(id)!)))
        }), 90_000)
    })
  }
)
