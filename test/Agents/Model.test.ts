import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The agent is declared once (src/Agents/Api.ts) and read, written and
// listed through the one tenant-scoped repository (src/Database/TenantRepo.ts):
// every route shows the same fields, and an update writes only what it carries.

const fields = [
  "id",
  "name",
  "description",
  "model",
  "instructions",
  "status",
  "memoryEnabled",
  "knowledgeIds",
  "toolIds",
  "responseFormat",
  "createdAt",
  "updatedAt"
]
const v1Fields = ["id", "name", "description", "model", "status", "memoryEnabled", "createdAt"]

layer(TestServer.layer({ defaultModel: "openai/gpt-4o-mini" }), { excludeTestServices: true })(
  "the agent model",
  (it) => {
    it.effect("every management route shows the same fields, the API-key list the reference's", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const auth = { headers: TestServer.bearer(account.token) }
        const key = { headers: TestServer.bearer((yield* TestServer.createKey(account)).key) }
        const created = yield* client.request("POST", "/api/agents", { ...auth, body: { name: "Fields" } })
        assert.strictEqual(created.status, 201)
        const id = created.body.id as string
        const read = yield* client.request("GET", `/api/agents/${id}`, auth)
        const updated = yield* client.request("PUT", `/api/agents/${id}`, { ...auth, body: { name: "Fields 2" } })
        const listed = yield* client.request("GET", "/api/agents", auth)
        const v1 = yield* client.request("GET", "/api/v1/agents", key)
        for (const [route, body] of [
          ["create", created.body],
          ["get", read.body],
          ["update", updated.body],
          ["list", listed.body.data[0]]
        ]) {
          assert.sameMembers(Object.keys(body), fields, route)
        }
        assert.sameMembers(Object.keys(v1.body.data[0]), v1Fields)
        assert.deepStrictEqual(created.body.knowledgeIds, [])
        assert.deepStrictEqual(created.body.toolIds, [])
      })
    )

    it.effect("an update changes only the fields it carries; an empty one changes none", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const auth = { headers: TestServer.bearer(account.token) }
        const created = yield* client.request("POST", "/api/agents", {
          ...auth,
          body: {
            name: "Full",
            description: "All set",
            instructions: "Be kind.",
            status: "inactive",
            memoryEnabled: false
          }
        })
        assert.strictEqual(created.status, 201)
        const id = created.body.id as string
        const same = yield* client.request("PUT", `/api/agents/${id}`, { ...auth, body: {} })
        assert.strictEqual(same.status, 200)
        assert.deepStrictEqual({ ...same.body, updatedAt: undefined }, { ...created.body, updatedAt: undefined })
        const one = yield* client.request("PUT", `/api/agents/${id}`, { ...auth, body: { description: "" } })
        assert.strictEqual(one.status, 200)
        assert.deepStrictEqual(
          { ...one.body, updatedAt: undefined },
          { ...created.body, description: "", updatedAt: undefined }
        )
        const read = yield* client.request("GET", `/api/agents/${id}`, auth)
        assert.deepStrictEqual(read.body, one.body)
      })
    )

    it.effect("a cursor of one tenant's list shows another tenant nothing of it", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const owner = yield* TestServer.signUp()
        const stranger = yield* TestServer.signUp()
        for (let i = 0; i < 3; i++) yield* TestServer.createAgent(owner, { name: `Owned ${i}` })
        const page = yield* client.request("GET", "/api/agents?limit=1", { headers: TestServer.bearer(owner.token) })
        assert.isString(page.body.nextCursor)
        const foreign = yield* client.request("GET", `/api/agents?limit=1&cursor=${page.body.nextCursor}`, {
          headers: TestServer.bearer(stranger.token)
        })
        assert.strictEqual(foreign.status, 200)
        assert.deepStrictEqual(foreign.body, { data: [], total: 0, nextCursor: null })
      })
    )
  }
)
