import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { Agent } from "../../src/Agents/Api.ts"
import { AgentId } from "../../src/Domain/Ids.ts"
import { NotFound } from "../../src/Domain/Problems.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const ids = (page: { readonly data: ReadonlyArray<{ readonly id: string }> }) => page.data.map((agent) => agent.id)

/** The agent as the API-key list sends it: the reference's fields only, its date as on the wire. */
const referenceView = ({ id, name, description, model, status, memoryEnabled, createdAt }: typeof Agent.json.Type) => ({
  id,
  name,
  description,
  model,
  status,
  memoryEnabled,
  createdAt: createdAt.toISOString()
})

layer(TestServer.layer({ defaultModel: "openai/gpt-4o-mini" }), { excludeTestServices: true })("agents", (it) => {
  describe("management", () => {
    it.effect("creates with defaults, reads, updates partially and deletes", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        // The typed client decodes a success only at its declared status (201, 200, 204).
        const created = yield* api.agents.create({ payload: { name: "Scout" } })
        assert.deepInclude(created, {
          name: "Scout",
          description: "",
          instructions: "",
          model: "openai/gpt-4o-mini",
          status: "active",
          memoryEnabled: true
        })
        const params = { id: created.id }

        const read = yield* api.agents.get({ params })
        assert.deepStrictEqual(read, created)

        const updated = yield* api.agents.update({
          params,
          payload: { instructions: "Be brief.", memoryEnabled: false }
        })
        assert.strictEqual(updated.name, "Scout")
        assert.strictEqual(updated.instructions, "Be brief.")
        assert.strictEqual(updated.memoryEnabled, false)
        assert.isTrue(updated.updatedAt >= created.updatedAt)

        yield* api.agents.remove({ params })
        // Raw: the content type of the problem is part of the check.
        const gone = yield* client.request("GET", `/api/agents/${created.id}`, {
          headers: TestServer.bearer(account.token)
        })
        assert.strictEqual(gone.status, 404)
        assert.strictEqual(gone.headers.get("content-type"), "application/problem+json")
      })
    )

    it.effect(
      "lists show every change at once on this node; the API-key list has the active agents in the reference's fields, without instructions",
      () =>
        Effect.gen(function* () {
          const account = yield* TestServer.signUp()
          const api = yield* TestServer.apiClient(account.token)
          const keyApi = yield* TestServer.apiClient((yield* TestServer.createKey(account)).key)
          const v1List = keyApi.v1Agents.list({ query: {} })
          const first = yield* api.agents.create({ payload: { name: "First", instructions: "Secret." } })
          assert.deepStrictEqual(ids(yield* api.agents.list({ query: {} })), [first.id])
          assert.deepStrictEqual(ids(yield* v1List), [first.id])
          // Each change shows in the very next list, read twice (the second from what the node kept).
          const second = yield* api.agents.create({ payload: { name: "Second", status: "inactive" } })
          for (let i = 0; i < 2; i++) {
            const all = yield* api.agents.list({ query: {} })
            assert.deepStrictEqual(all, { data: [first, second], total: 2, nextCursor: null })
            // The bytes as sent, not only what the client decodes: no field beyond the reference's.
            const [, active] = yield* keyApi.v1Agents.list({ query: {}, responseMode: "decoded-and-response" })
            assert.strictEqual(active.headers["content-type"], "application/json")
            assert.deepStrictEqual(yield* active.json, {
              data: [referenceView(first)],
              total: 1,
              nextCursor: null
            })
          }
          yield* api.agents.update({ params: { id: second.id }, payload: { status: "active" } })
          assert.deepStrictEqual(ids(yield* v1List), [first.id, second.id])
          assert.strictEqual((yield* keyApi.v1Agents.list({ query: { limit: 1 } })).total, 2)
          yield* api.agents.remove({ params: { id: first.id } })
          assert.deepStrictEqual(ids(yield* v1List), [second.id])
          assert.deepStrictEqual(ids(yield* api.agents.list({ query: {} })), [second.id])
        })
    )

    // Raw: these bodies are what the typed client refuses to send.
    it.effect("names the bad field on create and update", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const auth = { headers: TestServer.bearer(account.token) }
        const cases: Array<[unknown, Array<string>]> = [
          [{}, ["payload", "name"]],
          [{ name: "" }, ["payload", "name"]],
          [{ name: 42 }, ["payload", "name"]],
          [{ name: "x", model: "gpt 4" }, ["payload", "model"]],
          [{ name: "x", status: "archived" }, ["payload", "status"]],
          [{ name: "x", memoryEnabled: "yes" }, ["payload", "memoryEnabled"]]
        ]
        for (const [body, path] of cases) {
          const response = yield* client.request("POST", "/api/agents", { ...auth, body })
          assert.strictEqual(response.status, 400, JSON.stringify(body))
          assert.deepStrictEqual(response.body.errors[0].path, path, JSON.stringify(body))
          assert.isString(response.body.errors[0].message)
        }
        const agent = yield* TestServer.createAgent(account)
        const badUpdate = yield* client.request("PUT", `/api/agents/${agent.id}`, { ...auth, body: { name: "" } })
        assert.strictEqual(badUpdate.status, 400)
        assert.deepStrictEqual(badUpdate.body.errors[0].path, ["payload", "name"])
      })
    )

    it.effect("another tenant's agent is 404 on read, update and delete, and absent from lists", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const owner = yield* TestServer.signUp()
        const stranger = yield* TestServer.signUp()
        const agent = yield* TestServer.createAgent(owner)
        const params = { id: AgentId.make(agent.id) }
        const strangerApi = yield* TestServer.apiClient(stranger.token)
        // Raw: the two problems are compared as sent, every field but the detail.
        const strangerAuth = { headers: TestServer.bearer(stranger.token) }
        const missing = yield* client.request("GET", "/api/agents/0190c1a8-0000-7000-8000-000000000000", strangerAuth)
        const read = yield* client.request("GET", `/api/agents/${agent.id}`, strangerAuth)
        assert.strictEqual(read.status, 404)
        assert.deepStrictEqual({ ...read.body, detail: undefined }, { ...missing.body, detail: undefined })
        const update = yield* Effect.flip(strangerApi.agents.update({ params, payload: { name: "Mine" } }))
        assert.instanceOf(update, NotFound)
        const remove = yield* Effect.flip(strangerApi.agents.remove({ params }))
        assert.instanceOf(remove, NotFound)
        const list = yield* strangerApi.agents.list({ query: {} })
        assert.strictEqual(list.total, 0)
        const keyApi = yield* TestServer.apiClient((yield* TestServer.createKey(stranger)).key)
        const v1 = yield* keyApi.v1Agents.list({ query: {} })
        assert.strictEqual(v1.total, 0)
        const ownerApi = yield* TestServer.apiClient(owner.token)
        const ownerRead = yield* ownerApi.agents.get({ params })
        assert.strictEqual(ownerRead.name, "Helper")
      })
    )

    it.effect("an id that cannot exist is simply not found", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const response = yield* Effect.flip(api.agents.get({ params: { id: AgentId.make("not-a-uuid") } }))
        assert.instanceOf(response, NotFound)
      })
    )
  })

  describe("GET /api/v1/agents", () => {
    it.effect("lists only active agents, paginated by cursor, with the full total", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(account, ["read"])
        const created: Array<string> = []
        for (let i = 0; i < 5; i++) {
          created.push((yield* TestServer.createAgent(account, { name: `Agent ${i}` })).id)
        }
        yield* TestServer.createAgent(account, { name: "Retired", status: "inactive" })
        const keyApi = yield* TestServer.apiClient(key.key)

        const first = yield* keyApi.v1Agents.list({ query: { limit: 2 } })
        assert.strictEqual(first.total, 5)
        assert.deepStrictEqual(ids(first), created.slice(0, 2))
        assert.isNotNull(first.nextCursor)
        const second = yield* keyApi.v1Agents.list({ query: { limit: 2, cursor: first.nextCursor } })
        assert.deepStrictEqual(ids(second), created.slice(2, 4))
        assert.isNotNull(second.nextCursor)
        const third = yield* keyApi.v1Agents.list({ query: { limit: 2, cursor: second.nextCursor } })
        assert.deepStrictEqual(ids(third), created.slice(4))
        assert.isNull(third.nextCursor)
        assert.strictEqual(third.total, 5)

        const all = yield* keyApi.v1Agents.list({ query: {} })
        assert.strictEqual(all.data.length, 5)
        assert.isTrue(all.data.every((a) => a.status === "active"))
        const management = yield* (yield* TestServer.apiClient(account.token)).agents.list({ query: {} })
        assert.strictEqual(management.total, 6)
      })
    )

    // Raw: the typed client refuses to send these values.
    it.effect("rejects a bad limit or cursor with 400 naming the query parameter", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(account)
        const headers = TestServer.bearer(key.key)
        for (const limit of ["0", "201", "abc", "1.5"]) {
          const response = yield* client.request("GET", `/api/v1/agents?limit=${limit}`, { headers })
          assert.strictEqual(response.status, 400, limit)
          assert.deepStrictEqual(response.body.errors[0].path, ["query", "limit"], limit)
        }
        const cursor = yield* client.request("GET", "/api/v1/agents?cursor=%%%", { headers })
        assert.strictEqual(cursor.status, 400)
        assert.deepStrictEqual(cursor.body.errors[0].path, ["query", "cursor"])
      })
    )
  })
})
