import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

layer(TestServer.layer({ defaultModel: "openai/gpt-4o-mini" }), { excludeTestServices: true })("agents", (it) => {
  describe("management", () => {
    it.effect("creates with defaults, reads, updates partially and deletes", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const auth = { headers: TestServer.bearer(account.token) }
        const created = yield* client.request("POST", "/api/agents", { ...auth, body: { name: "Scout" } })
        assert.strictEqual(created.status, 201)
        assert.deepInclude(created.body, {
          name: "Scout",
          description: "",
          instructions: "",
          model: "openai/gpt-4o-mini",
          status: "active",
          memoryEnabled: true
        })
        const id = created.body.id as string

        const read = yield* client.request("GET", `/api/agents/${id}`, auth)
        assert.strictEqual(read.status, 200)
        assert.deepStrictEqual(read.body, created.body)

        const updated = yield* client.request("PUT", `/api/agents/${id}`, {
          ...auth,
          body: { instructions: "Be brief.", memoryEnabled: false }
        })
        assert.strictEqual(updated.status, 200)
        assert.strictEqual(updated.body.name, "Scout")
        assert.strictEqual(updated.body.instructions, "Be brief.")
        assert.strictEqual(updated.body.memoryEnabled, false)
        assert.isTrue(new Date(updated.body.updatedAt) >= new Date(created.body.updatedAt))

        const removed = yield* client.request("DELETE", `/api/agents/${id}`, auth)
        assert.strictEqual(removed.status, 204)
        const gone = yield* client.request("GET", `/api/agents/${id}`, auth)
        assert.strictEqual(gone.status, 404)
        assert.strictEqual(gone.headers.get("content-type"), "application/problem+json")
      })
    )

    it.effect(
      "lists show every change at once on this node; the API-key list has the active agents in the reference's fields, without instructions",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const account = yield* TestServer.signUp()
          const auth = { headers: TestServer.bearer(account.token) }
          const key = { headers: TestServer.bearer((yield* TestServer.createKey(account)).key) }
          const ids = (response: { readonly body: any }) =>
            (response.body.data as Array<{ id: string }>).map((a) => a.id)
          const first = yield* client.request("POST", "/api/agents", {
            ...auth,
            body: { name: "First", instructions: "Secret." }
          })
          assert.deepStrictEqual(ids(yield* client.request("GET", "/api/agents", auth)), [first.body.id])
          assert.deepStrictEqual(ids(yield* client.request("GET", "/api/v1/agents", key)), [first.body.id])
          // Each change shows in the very next list, read twice (the second from what the node kept).
          const second = yield* client.request("POST", "/api/agents", {
            ...auth,
            body: { name: "Second", status: "inactive" }
          })
          for (let i = 0; i < 2; i++) {
            const all = yield* client.request("GET", "/api/agents", auth)
            assert.deepStrictEqual(all.body, { data: [first.body, second.body], total: 2, nextCursor: null })
            const active = yield* client.request("GET", "/api/v1/agents", key)
            assert.strictEqual(active.headers.get("content-type"), "application/json")
            const { id, name, description, model, status, memoryEnabled, createdAt } = first.body
            assert.deepStrictEqual(active.body, {
              data: [{ id, name, description, model, status, memoryEnabled, createdAt }],
              total: 1,
              nextCursor: null
            })
          }
          yield* client.request("PUT", `/api/agents/${second.body.id}`, { ...auth, body: { status: "active" } })
          assert.deepStrictEqual(ids(yield* client.request("GET", "/api/v1/agents", key)), [
            first.body.id,
            second.body.id
          ])
          assert.strictEqual((yield* client.request("GET", "/api/v1/agents?limit=1", key)).body.total, 2)
          yield* client.request("DELETE", `/api/agents/${first.body.id}`, auth)
          assert.deepStrictEqual(ids(yield* client.request("GET", "/api/v1/agents", key)), [second.body.id])
          assert.deepStrictEqual(ids(yield* client.request("GET", "/api/agents", auth)), [second.body.id])
        })
    )

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
        const strangerAuth = { headers: TestServer.bearer(stranger.token) }
        const missing = yield* client.request("GET", "/api/agents/0190c1a8-0000-7000-8000-000000000000", strangerAuth)
        const read = yield* client.request("GET", `/api/agents/${agent.id}`, strangerAuth)
        assert.strictEqual(read.status, 404)
        assert.deepStrictEqual({ ...read.body, detail: undefined }, { ...missing.body, detail: undefined })
        const update = yield* client.request("PUT", `/api/agents/${agent.id}`, {
          ...strangerAuth,
          body: { name: "Mine" }
        })
        assert.strictEqual(update.status, 404)
        const remove = yield* client.request("DELETE", `/api/agents/${agent.id}`, strangerAuth)
        assert.strictEqual(remove.status, 404)
        const list = yield* client.request("GET", "/api/agents", strangerAuth)
        assert.strictEqual(list.body.total, 0)
        const key = yield* TestServer.createKey(stranger)
        const v1 = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(v1.body.total, 0)
        const ownerRead = yield* client.request("GET", `/api/agents/${agent.id}`, {
          headers: TestServer.bearer(owner.token)
        })
        assert.strictEqual(ownerRead.body.name, "Helper")
      })
    )

    it.effect("an id that cannot exist is simply not found", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const response = yield* client.request("GET", "/api/agents/not-a-uuid", {
          headers: TestServer.bearer(account.token)
        })
        assert.strictEqual(response.status, 404)
      })
    )
  })

  describe("GET /api/v1/agents", () => {
    it.effect("lists only active agents, paginated by cursor, with the full total", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(account, ["read"])
        const created: Array<string> = []
        for (let i = 0; i < 5; i++) {
          created.push((yield* TestServer.createAgent(account, { name: `Agent ${i}` })).id)
        }
        yield* TestServer.createAgent(account, { name: "Retired", status: "inactive" })
        const headers = TestServer.bearer(key.key)

        const first = yield* client.request("GET", "/api/v1/agents?limit=2", { headers })
        assert.strictEqual(first.status, 200)
        assert.strictEqual(first.body.total, 5)
        assert.deepStrictEqual(
          first.body.data.map((a: { id: string }) => a.id),
          created.slice(0, 2)
        )
        const second = yield* client.request("GET", `/api/v1/agents?limit=2&cursor=${first.body.nextCursor}`, {
          headers
        })
        assert.deepStrictEqual(
          second.body.data.map((a: { id: string }) => a.id),
          created.slice(2, 4)
        )
        const third = yield* client.request("GET", `/api/v1/agents?limit=2&cursor=${second.body.nextCursor}`, {
          headers
        })
        assert.deepStrictEqual(
          third.body.data.map((a: { id: string }) => a.id),
          created.slice(4)
        )
        assert.isNull(third.body.nextCursor)
        assert.strictEqual(third.body.total, 5)

        const all = yield* client.request("GET", "/api/v1/agents", { headers })
        assert.strictEqual(all.body.data.length, 5)
        assert.isTrue(all.body.data.every((a: { status: string }) => a.status === "active"))
        const management = yield* client.request("GET", "/api/agents", { headers: TestServer.bearer(account.token) })
        assert.strictEqual(management.body.total, 6)
      })
    )

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
