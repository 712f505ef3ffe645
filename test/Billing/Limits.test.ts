import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { PlanQuotas } from "../../src/Config.ts"
import type { Chunking } from "../../src/Knowledge/Chunking.ts"
import { split } from "../../src/Knowledge/Splitter.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient, type TestResponse } from "../support/TestServer.ts"

// Each per-plan quota at its boundary, for each plan: small limits set
// through configuration, a tenant of its own per quota and plan, the plan set
// in the database as an operator (or the Stripe webhook) would.

type Plan = "free" | "pro" | "business"
const plans: ReadonlyArray<readonly [Plan, number]> = [
  ["free", 1],
  ["pro", 2],
  ["business", 3]
]

// n is 1, 2, 3 for free, pro, business. Documents and orchestrations get one
// more place than what is tested beside them (bytes, webhook URLs), so that
// each scenario meets the limit it is about.
const quotasOf = (n: number): PlanQuotas => ({
  knowledgeBases: n,
  documents: n + 1,
  storedBytes: 20_000 * n,
  chunks: 1 + 2 * n,
  agents: n,
  orchestrations: n + 1,
  teams: n,
  apiKeys: n,
  webhookEndpoints: n,
  secrets: n,
  tools: n
})

const settings = {
  planQuotas: { free: quotasOf(1), pro: quotasOf(2), business: quotasOf(3) },
  // Every scenario registers a tenant from 127.0.0.1.
  authAttemptsPerAddress: 10_000,
  webhookAllowPrivate: true,
  rechunkBurst: 2,
  rechunkInterval: Duration.hours(1)
}

const hook = "http://127.0.0.1:9/hook"

const session = (account: Account) => TestServer.bearer(account.token)

const tenantOn = (plan: Plan) =>
  Effect.gen(function* () {
    const account = yield* TestServer.signUp()
    const sql = yield* SqlClient.SqlClient
    yield* sql`UPDATE tenants SET plan = ${plan} WHERE id = ${account.tenantId}`
    return account
  })

const post = (account: Account, path: string, body: unknown) =>
  Effect.flatMap(TestClient, (client) => client.request("POST", path, { headers: session(account), body }))

const request = (account: Account, method: string, path: string, body?: unknown) =>
  Effect.flatMap(TestClient, (client) =>
    client.request(method, path, { headers: session(account), ...(body === undefined ? {} : { body }) })
  )

const created = (response: TestResponse, what: string) => {
  assert.include([200, 201, 202], response.status, `${what}: ${response.text}`)
  return response.body
}

const setting: Record<keyof PlanQuotas, string> = {
  knowledgeBases: "MAX_KNOWLEDGE_BASES",
  documents: "MAX_DOCUMENTS",
  storedBytes: "MAX_STORED_BYTES",
  chunks: "MAX_CHUNKS",
  agents: "MAX_AGENTS",
  orchestrations: "MAX_ORCHESTRATIONS",
  teams: "MAX_TEAMS",
  apiKeys: "MAX_API_KEYS",
  webhookEndpoints: "MAX_WEBHOOK_ENDPOINTS",
  secrets: "MAX_SECRETS",
  tools: "MAX_TOOLS"
}

/** The refusal names the quota, its setting, the plan, the limit, what the tenant has and what it asked for. */
const assertRefused = (
  response: TestResponse,
  expected: {
    readonly quota: keyof PlanQuotas
    readonly plan: Plan
    readonly limit: number
    readonly used: number
    readonly requested?: number
  }
) => {
  const storage = expected.quota === "storedBytes"
  assert.strictEqual(response.status, storage ? 413 : 429, response.text)
  assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
  assert.strictEqual(
    response.body.type,
    `urn:agent-host:problem:${storage ? "storage-quota-exceeded" : "quota-reached"}`
  )
  assert.deepInclude(response.body, {
    quota: expected.quota,
    setting: `${expected.plan.toUpperCase()}_${setting[expected.quota]}`,
    plan: expected.plan,
    limit: expected.limit,
    used: expected.used,
    requested: expected.requested ?? 1
  })
  assert.include(response.body.detail, `${expected.plan.toUpperCase()}_${setting[expected.quota]}`)
  // Waiting does not help: no Retry-After.
  assert.isNull(response.headers.get("retry-after"))
}

const createAgent = (account: Account) => post(account, "/api/agents", { name: "Helper", model: "local" })
const createBase = (account: Account, chunking?: Partial<Chunking>) =>
  post(account, "/api/knowledge", { name: "Docs", ...(chunking === undefined ? {} : { chunking }) })
const upload = (account: Account, knowledgeId: string, filename: string, content: string) =>
  post(account, `/api/knowledge/${knowledgeId}/upload?duplicates=allow`, { filename, content })

/** Polls the document until it is no longer processing (bounded). */
const settled = (account: Account, knowledgeId: string, documentId: string) =>
  eventually(
    Effect.map(request(account, "GET", `/api/knowledge/${knowledgeId}/documents/${documentId}`), (got) => {
      assert.strictEqual(got.status, 200, got.text)
      assert.notStrictEqual(got.body.status, "processing", `document ${documentId} still processing`)
      return got.body
    }),
    { timeoutMs: 30_000 }
  )

const documentsOf = (response: TestResponse): ReadonlyArray<any> =>
  response.status === 201 ? [response.body] : response.body.data

/** A text of sentences that the splitter cuts into exactly `count` chunks under `chunking`, as ingestion does. */
const textOfChunks = (count: number, chunking: Chunking, also?: (text: string) => boolean) => {
  for (let sentences = 1; sentences < 2_000; sentences++) {
    const text = Array.from(
      { length: sentences },
      (_, i) => `Sentence number ${i} talks about lanterns and harbours.`
    ).join(" ")
    if (split({ text, kind: "text" }, chunking).length === count && (also?.(text) ?? true)) return text
  }
  throw new Error(`No text of ${count} chunks`)
}

const chunking128: Chunking = { strategy: "auto", chunkSize: 128, chunkOverlap: 0 }
const chunking64: Chunking = { strategy: "auto", chunkSize: 64, chunkOverlap: 0 }

layer(TestServer.layer(settings), { excludeTestServices: true })("per-plan quotas", (it) => {
  describe("definitions, created one at a time", () => {
    it.effect(
      "agents: each plan's MAX_AGENTS are created, the next is a 429 naming the quota; a deletion frees a place",
      () =>
        Effect.gen(function* () {
          for (const [plan, n] of plans) {
            const account = yield* tenantOn(plan)
            const ids: Array<string> = []
            for (let i = 0; i < n; i++) ids.push(created(yield* createAgent(account), `${plan} agent ${i}`).id)
            assertRefused(yield* createAgent(account), { quota: "agents", plan, limit: n, used: n })
            const listed = yield* request(account, "GET", "/api/agents")
            assert.strictEqual(listed.body.total, n, plan)
            assert.strictEqual((yield* request(account, "DELETE", `/api/agents/${ids[0]}`)).status, 204)
            created(yield* createAgent(account), `${plan} agent after a deletion`)
            assertRefused(yield* createAgent(account), { quota: "agents", plan, limit: n, used: n })
          }
        })
    )

    it.effect("orchestrations: each plan's MAX_ORCHESTRATIONS, then 429", () =>
      Effect.gen(function* () {
        for (const [plan, n] of plans) {
          const account = yield* tenantOn(plan)
          const agent = created(yield* createAgent(account), "agent")
          const orchestration = { name: "One", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }] }
          for (let i = 0; i < n + 1; i++)
            created(yield* post(account, "/api/orchestrations", orchestration), `${plan} orchestration ${i}`)
          assertRefused(yield* post(account, "/api/orchestrations", orchestration), {
            quota: "orchestrations",
            plan,
            limit: n + 1,
            used: n + 1
          })
        }
      })
    )

    it.effect("teams: each plan's MAX_TEAMS, then 429", () =>
      Effect.gen(function* () {
        for (const [plan, n] of plans) {
          const account = yield* tenantOn(plan)
          const agent = created(yield* createAgent(account), "agent")
          const team = { name: "Team", members: [{ agentId: agent.id, role: "helper" }] }
          for (let i = 0; i < n; i++) created(yield* post(account, "/api/teams", team), `${plan} team ${i}`)
          assertRefused(yield* post(account, "/api/teams", team), { quota: "teams", plan, limit: n, used: n })
        }
      })
    )

    it.effect("API keys: each plan's MAX_API_KEYS, then 429; a revoked key frees its place", () =>
      Effect.gen(function* () {
        for (const [plan, n] of plans) {
          const account = yield* tenantOn(plan)
          const ids: Array<string> = []
          for (let i = 0; i < n; i++)
            ids.push(created(yield* post(account, "/api/keys", { name: `key ${i}` }), `${plan} key ${i}`).id)
          assertRefused(yield* post(account, "/api/keys", { name: "one more" }), {
            quota: "apiKeys",
            plan,
            limit: n,
            used: n
          })
          assert.strictEqual((yield* request(account, "DELETE", `/api/keys/${ids[0]}`)).status, 204)
          created(yield* post(account, "/api/keys", { name: "in its place" }), `${plan} key after a revocation`)
        }
      })
    )

    it.effect(
      "webhook URLs: each plan's MAX_WEBHOOK_ENDPOINTS, then 429 on create (nothing left behind) and on update",
      () =>
        Effect.gen(function* () {
          for (const [plan, n] of plans) {
            const account = yield* tenantOn(plan)
            const agent = created(yield* createAgent(account), "agent")
            const steps = [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }]
            // A team's room counts as an orchestration's webhook does.
            created(
              yield* post(account, "/api/teams", {
                name: "Team",
                members: [{ agentId: agent.id }],
                room: { outputWebhookUrl: hook }
              }),
              "team"
            )
            for (let i = 1; i < n; i++)
              created(
                yield* post(account, "/api/orchestrations", { name: `O${i}`, steps, outputWebhookUrl: hook }),
                `${plan} o${i}`
              )
            const refused = yield* post(account, "/api/orchestrations", { name: "Past", steps, outputWebhookUrl: hook })
            assertRefused(refused, { quota: "webhookEndpoints", plan, limit: n, used: n })
            const listed = yield* request(account, "GET", "/api/orchestrations")
            assert.deepStrictEqual(
              listed.body.data.map((o: any) => o.name).sort(),
              Array.from({ length: n - 1 }, (_, i) => `O${i + 1}`).sort()
            )
            const plain = created(
              yield* post(account, "/api/orchestrations", { name: "Plain", steps }),
              "without a webhook"
            )
            assertRefused(
              yield* request(account, "PUT", `/api/orchestrations/${plain.id}`, { outputWebhookUrl: hook }),
              {
                quota: "webhookEndpoints",
                plan,
                limit: n,
                used: n
              }
            )
          }
        })
    )

    it.effect("knowledge bases: each plan's MAX_KNOWLEDGE_BASES, then 429", () =>
      Effect.gen(function* () {
        for (const [plan, n] of plans) {
          const account = yield* tenantOn(plan)
          for (let i = 0; i < n; i++) created(yield* createBase(account), `${plan} base ${i}`)
          assertRefused(yield* createBase(account), { quota: "knowledgeBases", plan, limit: n, used: n })
        }
      })
    )

    it.effect("concurrent creates of one tenant never pass the limit together", () =>
      Effect.gen(function* () {
        const account = yield* tenantOn("pro")
        const responses = yield* Effect.forEach(Array.from({ length: 30 }), () => createAgent(account), {
          concurrency: "unbounded"
        })
        assert.deepStrictEqual(responses.map((r) => r.status).sort(), [201, 201, ...Array(28).fill(429)])
        assert.strictEqual((yield* request(account, "GET", "/api/agents")).body.total, 2)
      })
    )
  })

  describe("knowledge", () => {
    it.effect("documents: each plan's MAX_DOCUMENTS; an upload that would pass it stores none of its files", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        for (const [plan, n] of plans) {
          const account = yield* tenantOn(plan)
          const base = created(yield* createBase(account), "base")
          for (let i = 0; i < n; i++)
            created(yield* upload(account, base.id, `d${i}.txt`, `Document ${i}.`), `${plan} document ${i}`)
          // Two files with one place left: refused as a whole.
          const form = new FormData()
          form.append("files", new Blob(["First of two."], { type: "text/plain" }), "a.txt")
          form.append("files", new Blob(["Second of two."], { type: "text/plain" }), "b.txt")
          const both = yield* Effect.promise(async () => {
            const response = await fetch(`${client.baseUrl}/api/knowledge/${base.id}/upload`, {
              method: "POST",
              headers: session(account),
              body: form
            })
            const text = await response.text()
            return { status: response.status, headers: response.headers, text, body: JSON.parse(text) }
          })
          assertRefused(both, { quota: "documents", plan, limit: n + 1, used: n, requested: 2 })
          assert.strictEqual((yield* request(account, "GET", `/api/knowledge/${base.id}/documents`)).body.total, n)
          created(yield* upload(account, base.id, "last.txt", "The last one."), `${plan} last document`)
          assertRefused(yield* upload(account, base.id, "past.txt", "One too many."), {
            quota: "documents",
            plan,
            limit: n + 1,
            used: n + 1
          })
        }
      })
    )

    it.effect("stored bytes: each plan's MAX_STORED_BYTES exactly, then 413", () =>
      Effect.gen(function* () {
        for (const [plan, n] of plans) {
          const account = yield* tenantOn(plan)
          const limit = 20_000 * n
          const base = created(yield* createBase(account), "base")
          const first = yield* upload(account, base.id, "big.txt", "a".repeat(limit - 10))
          created(first, `${plan} big`)
          assert.strictEqual(documentsOf(first)[0].bytes, limit - 10)
          created(yield* upload(account, base.id, "ten.txt", "0123456789"), `${plan} to the byte`)
          assertRefused(yield* upload(account, base.id, "one.txt", "1"), {
            quota: "storedBytes",
            plan,
            limit,
            used: limit
          })
        }
      })
    )

    it.effect(
      "chunks: each plan's MAX_CHUNKS at upload, at ingestion (failed, chunk_limit) and at rechunk (old chunks kept)",
      () =>
        Effect.gen(function* () {
          for (const [plan, n] of plans) {
            const limit = 1 + 2 * n
            const account = yield* tenantOn(plan)
            const base = created(yield* createBase(account, chunking128), "base")
            // Exactly the limit: ready.
            const full = documentsOf(yield* upload(account, base.id, "full.txt", textOfChunks(limit, chunking128)))[0]
            const ready = yield* settled(account, base.id, full.id)
            assert.deepInclude(ready, { status: "ready", chunkCount: limit }, plan)
            // Nothing left: an upload is refused before it is stored.
            assertRefused(yield* upload(account, base.id, "more.txt", "More."), {
              quota: "chunks",
              plan,
              limit,
              used: limit
            })
            assert.strictEqual(
              (yield* request(account, "DELETE", `/api/knowledge/${base.id}/documents/${full.id}`)).status,
              204
            )
            // One chunk too many: the document ends failed, with the reason, and keeps nothing.
            const over = documentsOf(
              yield* upload(account, base.id, "over.txt", textOfChunks(limit + 1, chunking128))
            )[0]
            const failed = yield* settled(account, base.id, over.id)
            assert.strictEqual(failed.status, "failed", plan)
            assert.strictEqual(failed.error.code, "chunk_limit")
            assert.include(failed.error.message, `${plan.toUpperCase()}_MAX_CHUNKS`)
            assert.strictEqual(failed.chunkCount, 0)
            // A rechunk that would pass the limit is refused; the document keeps its chunks.
            const text = textOfChunks(
              limit - 1,
              chunking128,
              (candidate) => split({ text: candidate, kind: "text" }, chunking64).length > limit
            )
            const small = documentsOf(yield* upload(account, base.id, "small.txt", text))[0]
            assert.strictEqual((yield* settled(account, base.id, small.id)).chunkCount, limit - 1)
            const rechunk = `/api/knowledge/${base.id}/documents/${small.id}/rechunk`
            assertRefused(yield* post(account, rechunk, { chunkSize: 64 }), {
              quota: "chunks",
              plan,
              limit,
              used: 0,
              requested: split({ text, kind: "text" }, chunking64).length
            })
            const chunks = yield* request(
              account,
              "GET",
              `/api/knowledge/${base.id}/chunks?documentId=${small.id}&limit=100`
            )
            assert.strictEqual(chunks.body.total, limit - 1)
            const bigger = yield* post(account, rechunk, { chunkSize: 512 })
            assert.strictEqual(bigger.status, 200, bigger.text)
          }
        })
    )

    it.effect("concurrent uploads of one tenant never pass MAX_DOCUMENTS together", () =>
      Effect.gen(function* () {
        const account = yield* tenantOn("free")
        const base = created(yield* createBase(account), "base")
        const responses = yield* Effect.forEach(
          Array.from({ length: 6 }, (_, i) => i),
          (i) => upload(account, base.id, `c${i}.txt`, `Concurrent ${i}.`),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(responses.filter((r) => r.status === 429).length, 4, responses.map((r) => r.status).join())
        assert.strictEqual((yield* request(account, "GET", `/api/knowledge/${base.id}/documents`)).body.total, 2)
      })
    )

    it.effect(
      "a document is rechunked RECHUNK_BURST times, then 429 with Retry-After until RECHUNK_INTERVAL pays one back",
      () =>
        Effect.gen(function* () {
          const account = yield* tenantOn("free")
          const base = created(yield* createBase(account), "base")
          const document = documentsOf(yield* upload(account, base.id, "r.txt", "Rechunked text about harbours."))[0]
          assert.strictEqual((yield* settled(account, base.id, document.id)).status, "ready")
          const rechunk = `/api/knowledge/${base.id}/documents/${document.id}/rechunk`
          // Refused settings take nothing.
          assert.strictEqual((yield* post(account, rechunk, { chunkSize: 64, chunkOverlap: 100 })).status, 400)
          assert.strictEqual((yield* post(account, rechunk, { chunkSize: 128 })).status, 200)
          assert.strictEqual((yield* post(account, rechunk, { chunkSize: 256 })).status, 200)
          const refused = yield* post(account, rechunk, { chunkSize: 512 })
          assert.strictEqual(refused.status, 429, refused.text)
          assert.strictEqual(refused.body.type, "urn:agent-host:problem:rechunk-rate-limited")
          const retryAfter = Number(refused.headers.get("retry-after"))
          assert.strictEqual(refused.body.retryAfter, retryAfter)
          assert.isTrue(retryAfter > 3_500 && retryAfter <= 3_600, `${retryAfter}`)
          // The allowance is the document's: another document of the tenant is rechunked at once.
          const other = documentsOf(yield* upload(account, base.id, "s.txt", "Another text about lanterns."))[0]
          assert.strictEqual((yield* settled(account, base.id, other.id)).status, "ready")
          assert.strictEqual(
            (yield* post(account, `/api/knowledge/${base.id}/documents/${other.id}/rechunk`, { chunkSize: 128 }))
              .status,
            200
          )
          // Once an interval has passed (moved back in the database), one more is allowed.
          const sql = yield* SqlClient.SqlClient
          yield* sql`UPDATE knowledge_documents SET rechunk_tat = rechunk_tat - interval '1 hour' WHERE id = ${document.id}`
          assert.strictEqual((yield* post(account, rechunk, { chunkSize: 512 })).status, 200)
          assert.strictEqual((yield* post(account, rechunk, { chunkSize: 128 })).status, 429)
        })
    )
  })
})
