import { assert, describe, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { SqlClient } from "effect/sql"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// Distinct texts, each long enough that its extraction and split take a while.
const textOf = (tenant: string, n: number) =>
  Array.from(
    { length: 5_000 },
    (_, i) => `${tenant} document ${n}, sentence ${i}: the lantern ${(i * 7 + n) % 97} lights harbour ${i % 13}.`
  ).join(" ")

const createBase = (account: Account) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/knowledge", { headers: TestServer.bearer(account.token), body: { name: "Slots" } })
  ).pipe(Effect.map((response) => response.body.id as string))

const upload = (account: Account, knowledgeId: string, filename: string, content: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/knowledge/${knowledgeId}/upload`, {
      headers: TestServer.bearer(account.token),
      body: { filename, content }
    })
  ).pipe(
    Effect.map((response) => {
      // Ready within the upload's short wait (201), or still processing behind the tenant's other documents (202).
      if (response.status === 201) return response.body.id as string
      if (response.status === 202) return response.body.data[0].id as string
      throw new Error(`upload ${filename}: ${response.status} ${response.text}`)
    })
  )

const documentsOf = (account: Account, knowledgeId: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("GET", `/api/knowledge/${knowledgeId}/documents`, { headers: TestServer.bearer(account.token) })
  ).pipe(
    Effect.map((response) => {
      if (response.status !== 200) throw new Error(`documents: ${response.status} ${response.text}`)
      return new Map(
        (response.body.data as ReadonlyArray<{ id: string }>).map((document) => [document.id, document as any])
      )
    })
  )

/**
 * Uploads `count` documents while the test holds the tenant's extraction lock
 * (the one `takeExtractionSlot` takes), so that they all queue up in the
 * database before any takes a place; checks what each says of its wait; then
 * lets them go, and returns the most places the tenant held at once until all
 * are ready, and the documents as then read.
 */
const queueThenRun = (account: Account, count: number, limit: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const base = yield* createBase(account)
    let most = 0
    const sampler = yield* Effect.forkChild(
      Effect.forever(
        Effect.gen(function* () {
          const [row] = yield* sql<{ holding: number }>`
        SELECT count(*)::int AS holding FROM knowledge_documents
        WHERE tenant_id = ${account.tenantId} AND status = 'processing' AND extraction_slot_at IS NOT NULL`
          most = Math.max(most, row?.holding ?? 0)
          yield* Effect.sleep("5 millis")
        })
      )
    )
    yield* Effect.gen(function* () {
      yield* sql`SELECT pg_advisory_xact_lock(hashtextextended(${`knowledge-extraction:${account.tenantId}`}, 0))`
      yield* Effect.forEach(
        Array.from({ length: count }, (_, n) => n),
        (n) => upload(account, base, `queued-${n}.txt`, textOf(`queued ${account.tenantId}`, n)),
        { concurrency: "unbounded" }
      )
      const order = (yield* sql<{ id: string }>`
        SELECT id FROM knowledge_documents WHERE tenant_id = ${account.tenantId} ORDER BY created_at, id`).map(
        (row) => row.id
      )
      assert.strictEqual(order.length, count)
      const listed = yield* documentsOf(account, base)
      order.forEach((id, ahead) => {
        const document = listed.get(id)
        assert.strictEqual(document.status, "processing")
        // The first `limit` have a place free to take; the rest wait behind the older ones.
        if (ahead < limit) assert.isFalse("waiting" in document, `document ${ahead} should not wait`)
        else assert.deepStrictEqual(document.waiting, { reason: "tenant_concurrency", ahead, limit })
      })
      // The single read says the same as the list.
      const last = yield* Effect.flatMap(TestClient, (client) =>
        client.request("GET", `/api/knowledge/${base}/documents/${order[count - 1]}`, {
          headers: TestServer.bearer(account.token)
        })
      )
      assert.deepStrictEqual(last.body.waiting, { reason: "tenant_concurrency", ahead: count - 1, limit })
    }).pipe(sql.withTransaction)
    yield* TestServer.waitFor(
      "the queued documents to be ready",
      sql<{ waiting: number }>`SELECT count(*)::int AS waiting FROM knowledge_documents
                               WHERE tenant_id = ${account.tenantId} AND status <> 'ready'`.pipe(
        Effect.map((rows) => (rows[0]!.waiting === 0 ? true : undefined)),
        Effect.orDie
      ),
      60_000
    )
    yield* Fiber.interrupt(sampler)
    return { most, documents: yield* documentsOf(account, base) }
  })

layer(TestServer.layer({ extractionConcurrency: 3, freeExtractionConcurrency: 1, proExtractionConcurrency: 2 }), {
  excludeTestServices: true
})("ingestion places", (it) => {
  describe("per tenant, in the database", () => {
    it.effect(
      "one tenant's documents are extracted one at a time (FREE_EXTRACTION_CONCURRENCY=1) while another tenant's goes at once",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const busy = yield* TestServer.signUp()
          const other = yield* TestServer.signUp()
          const busyBase = yield* createBase(busy)
          const otherBase = yield* createBase(other)
          // The most documents each tenant held places for at once, read every few milliseconds.
          const most = new Map<string, number>()
          const sampler = yield* Effect.forkChild(
            Effect.forever(
              Effect.gen(function* () {
                const rows = yield* sql<{ tenantId: string; holding: number }>`
              SELECT tenant_id, count(*)::int AS holding FROM knowledge_documents
              WHERE status = 'processing' AND extraction_slot_at IS NOT NULL GROUP BY tenant_id`
                for (const row of rows) most.set(row.tenantId, Math.max(most.get(row.tenantId) ?? 0, row.holding))
                yield* Effect.sleep("5 millis")
              })
            )
          )
          const busyUploads = yield* Effect.forkChild(
            Effect.forEach(
              Array.from({ length: 5 }, (_, n) => n),
              (n) => upload(busy, busyBase, `busy-${n}.txt`, textOf("busy", n)),
              { concurrency: "unbounded" }
            )
          )
          // Once the busy tenant's documents hold its place and wait for it.
          yield* TestServer.waitFor(
            "the busy tenant's documents to hold a place",
            Effect.sync(() => most.get(busy.tenantId)),
            20_000
          )
          const otherId = yield* upload(other, otherBase, "other.txt", textOf("other", 0))
          const busyIds = yield* Fiber.join(busyUploads)
          yield* TestServer.waitFor(
            "every document to be ready",
            sql<{
              waiting: number
            }>`SELECT count(*)::int AS waiting FROM knowledge_documents WHERE status <> 'ready'`.pipe(
              Effect.map((rows) => (rows[0]!.waiting === 0 ? true : undefined)),
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
        }),
      90_000
    )

    it.effect(
      "the cap follows the plan, and a waiting document says so until it runs (free: 1, pro: 2)",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const free = yield* TestServer.signUp()
          const pro = yield* TestServer.signUp()
          yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${pro.tenantId}`
          for (const [account, limit] of [
            [free, 1],
            [pro, 2]
          ] as const) {
            const { documents, most } = yield* queueThenRun(account, 4, limit)
            assert.strictEqual(most, limit, `the most places held at once, cap ${limit}`)
            assert.strictEqual(documents.size, 4)
            for (const document of documents.values()) {
              assert.strictEqual(document.status, "ready")
              assert.isFalse("waiting" in document)
            }
          }
        }),
      120_000
    )
  })
})
