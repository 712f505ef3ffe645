import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The orchestration is declared once (src/Orchestrations/Api.ts) and read,
// written and listed through the one tenant-scoped repository
// (src/Database/TenantRepo.ts): every management route shows the same fields
// in the same order, its webhook's with them, and an update writes only what
// it carries.

const fields = [
  "id",
  "name",
  "description",
  "status",
  "steps",
  "timeoutMs",
  "createdAt",
  "updatedAt",
  "outputWebhookUrl",
  "webhookEnabled",
  "webhookDisabledReason"
]
const v1Fields = ["id", "name", "description", "status", "createdAt"]

const setUp = Effect.gen(function* () {
  const account = yield* TestServer.signUp()
  const agent = yield* TestServer.createAgent(account)
  return { account, agent, auth: { headers: TestServer.bearer(account.token) } }
})

layer(TestServer.layer(), { excludeTestServices: true })("the orchestration model", (it) => {
  it.effect("every management route shows the same fields in the same order, the API-key list the reference's", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const { account, agent, auth } = yield* setUp
      const key = { headers: TestServer.bearer((yield* TestServer.createKey(account)).key) }
      const steps = [{ id: "only", agentId: agent.id, prompt: "Say {{input}}" }]
      const created = yield* client.request("POST", "/api/orchestrations", { ...auth, body: { name: "Fields", steps } })
      assert.strictEqual(created.status, 201)
      const id = created.body.id as string
      const read = yield* client.request("GET", `/api/orchestrations/${id}`, auth)
      const updated = yield* client.request("PUT", `/api/orchestrations/${id}`, { ...auth, body: { name: "Fields 2" } })
      const listed = yield* client.request("GET", "/api/orchestrations", auth)
      const v1 = yield* client.request("GET", "/api/v1/orchestrations", key)
      for (const [route, body] of [
        ["create", created.body],
        ["get", read.body],
        ["update", updated.body],
        ["list", listed.body.data[0]]
      ]) {
        assert.deepStrictEqual(Object.keys(body), fields, route)
      }
      assert.deepStrictEqual(Object.keys(v1.body.data[0]), v1Fields)
      assert.deepStrictEqual(Object.keys(listed.body), ["data", "total", "nextCursor"])
      assert.deepInclude(created.body, {
        description: "",
        status: "active",
        steps,
        timeoutMs: 300_000,
        outputWebhookUrl: null,
        webhookEnabled: false,
        webhookDisabledReason: null
      })
    })
  )

  it.effect("an update changes only the fields it carries; an empty one changes none", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const { agent, auth } = yield* setUp
      const steps = [
        { id: "a", agentId: agent.id, prompt: "Say {{input}}" },
        { id: "b", agentId: agent.id, prompt: "Then {{steps.a.output}}", dependsOn: ["a"] }
      ]
      const created = yield* client.request("POST", "/api/orchestrations", {
        ...auth,
        body: { name: "Full", description: "All set", status: "inactive", steps, timeoutMs: 5_000 }
      })
      assert.strictEqual(created.status, 201)
      const id = created.body.id as string
      const same = yield* client.request("PUT", `/api/orchestrations/${id}`, { ...auth, body: {} })
      assert.strictEqual(same.status, 200)
      assert.deepStrictEqual({ ...same.body, updatedAt: undefined }, { ...created.body, updatedAt: undefined })
      const one = yield* client.request("PUT", `/api/orchestrations/${id}`, { ...auth, body: { description: "" } })
      assert.strictEqual(one.status, 200)
      assert.deepStrictEqual(
        { ...one.body, updatedAt: undefined },
        { ...created.body, description: "", updatedAt: undefined }
      )
      const newSteps = [{ id: "c", agentId: agent.id, prompt: "Only {{input}}" }]
      const replaced = yield* client.request("PUT", `/api/orchestrations/${id}`, { ...auth, body: { steps: newSteps } })
      assert.strictEqual(replaced.status, 200)
      assert.deepStrictEqual(
        { ...replaced.body, updatedAt: undefined },
        { ...one.body, steps: newSteps, updatedAt: undefined }
      )
      const read = yield* client.request("GET", `/api/orchestrations/${id}`, auth)
      assert.deepStrictEqual(read.body, replaced.body)
    })
  )

  it.effect("a cursor of one tenant's list shows another tenant nothing of it", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const { agent, auth } = yield* setUp
      const stranger = yield* TestServer.signUp()
      for (let i = 0; i < 3; i++) {
        const created = yield* client.request("POST", "/api/orchestrations", {
          ...auth,
          body: { name: `Owned ${i}`, steps: [{ id: "s", agentId: agent.id, prompt: "{{input}}" }] }
        })
        assert.strictEqual(created.status, 201)
      }
      const page = yield* client.request("GET", "/api/orchestrations?limit=1", auth)
      assert.isString(page.body.nextCursor)
      for (const path of ["/api/orchestrations", "/api/v1/orchestrations"]) {
        const headers = path.includes("/v1/")
          ? TestServer.bearer((yield* TestServer.createKey(stranger)).key)
          : TestServer.bearer(stranger.token)
        const foreign = yield* client.request("GET", `${path}?limit=1&cursor=${page.body.nextCursor}`, { headers })
        assert.strictEqual(foreign.status, 200, path)
        assert.deepStrictEqual(foreign.body, { data: [], total: 0, nextCursor: null }, path)
      }
    })
  )
})
