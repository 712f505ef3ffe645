import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { ApiKeyId } from "../../src/Domain/Ids.ts"
import { NotFound } from "../../src/Domain/Problems.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

layer(TestServer.layer(), { excludeTestServices: true })("API keys", (it) => {
  describe("management", () => {
    it.effect("shows the plaintext once; the list has no key, only its prefix", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const created = yield* api.keys.create({ payload: { name: "ci", scopes: ["read", "chat"] } })
        assert.match(created.key, /^ak_/)
        assert.strictEqual(created.prefix, created.key.slice(0, 11))
        assert.deepStrictEqual(created.scopes, ["read", "chat"])

        // The bytes as sent, not only what the client decodes: the key is nowhere in them.
        const [list, response] = yield* api.keys.list({ query: {}, responseMode: "decoded-and-response" })
        assert.strictEqual(list.total, 1)
        assert.notInclude(yield* response.text, created.key)
        assert.strictEqual(list.data[0]!.prefix, created.prefix)
      })
    )

    it.effect("gives a key without a scopes list every scope", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const created = yield* api.keys.create({ payload: { name: "all" } })
        assert.deepStrictEqual(created.scopes, ["read", "chat", "execute", "teams"])
      })
    )

    it.effect("rejects unknown scopes, an empty scopes list and a missing name with 400", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const unknown = yield* client.request("POST", "/api/keys", {
          headers: TestServer.bearer(account.token),
          body: { name: "x", scopes: ["admin"] }
        })
        assert.strictEqual(unknown.status, 400)
        assert.deepStrictEqual(unknown.body.errors[0].path, ["payload", "scopes", 0])
        const empty = yield* client.request("POST", "/api/keys", {
          headers: TestServer.bearer(account.token),
          body: { name: "x", scopes: [] }
        })
        assert.strictEqual(empty.status, 400)
        assert.deepStrictEqual(empty.body.errors[0].path, ["payload", "scopes"])
        const noName = yield* client.request("POST", "/api/keys", {
          headers: TestServer.bearer(account.token),
          body: {}
        })
        assert.strictEqual(noName.status, 400)
        assert.deepStrictEqual(noName.body.errors[0].path, ["payload", "name"])
      })
    )

    it.effect("lists the keys a page at a time, oldest first; without a limit, one default page", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const created: Array<string> = []
        for (const name of ["k1", "k2", "k3", "k4", "k5"])
          created.push((yield* api.keys.create({ payload: { name } })).id)

        const first = yield* api.keys.list({ query: { limit: 2 } })
        assert.deepStrictEqual(
          first.data.map((k) => k.id),
          created.slice(0, 2)
        )
        assert.strictEqual(first.total, 5)
        assert.isNotNull(first.nextCursor)
        const second = yield* api.keys.list({ query: { limit: 2, cursor: first.nextCursor! } })
        assert.deepStrictEqual(
          second.data.map((k) => k.id),
          created.slice(2, 4)
        )
        const third = yield* api.keys.list({ query: { limit: 2, cursor: second.nextCursor! } })
        assert.deepStrictEqual(
          third.data.map((k) => k.id),
          created.slice(4)
        )
        assert.isNull(third.nextCursor)
        assert.strictEqual(third.total, 5)

        const all = yield* api.keys.list({ query: {} })
        assert.deepStrictEqual(
          all.data.map((k) => k.id),
          created
        )
        assert.strictEqual(all.total, 5)
        assert.isNull(all.nextCursor)
      })
    )

    it.effect("rejects a bad limit or cursor with a 400 problem naming the query parameter", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const headers = TestServer.bearer(account.token)
        for (const limit of ["0", "201", "abc", "1.5"]) {
          const response = yield* client.request("GET", `/api/keys?limit=${limit}`, { headers })
          assert.strictEqual(response.status, 400, limit)
          assert.deepStrictEqual(response.body.errors[0].path, ["query", "limit"], limit)
        }
        // AA decodes to a NUL; the other is the base64url of something that is not an id.
        for (const cursor of ["AA", Buffer.from("not-an-id").toString("base64url"), "%%%"]) {
          const response = yield* client.request("GET", `/api/keys?cursor=${cursor}`, { headers })
          assert.strictEqual(response.status, 400, cursor)
          assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
          assert.deepStrictEqual(response.body.errors[0].path, ["query", "cursor"], cursor)
        }
      })
    )

    it.effect("leaves revoked keys out of every page and of the total", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const created: Array<ApiKeyId> = []
        for (const name of ["a", "b", "c", "d"]) created.push((yield* api.keys.create({ payload: { name } })).id)
        yield* api.keys.revoke({ params: { id: created[1]! } })
        yield* api.keys.revoke({ params: { id: created[3]! } })

        const seen: Array<string> = []
        let cursor: string | null = null
        do {
          const page: { readonly data: ReadonlyArray<{ readonly id: string }>; readonly nextCursor: string | null } =
            yield* api.keys.list({ query: cursor === null ? { limit: 1 } : { limit: 1, cursor } })
          assert.isAtMost(page.data.length, 1)
          seen.push(...page.data.map((k) => k.id))
          cursor = page.nextCursor
        } while (cursor !== null)
        assert.deepStrictEqual(seen, [created[0], created[2]])
        assert.strictEqual((yield* api.keys.list({ query: { limit: 1 } })).total, 2)
      })
    )
  })

  describe("authentication on /api/v1", () => {
    it.effect("401 for a missing, malformed, unknown or non-bearer key", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(account)
        const cases: Array<Record<string, string>> = [
          {},
          { authorization: "Bearer" },
          { authorization: "Bearer not-a-key" },
          { authorization: `Bearer ak_${"A".repeat(43)}` },
          { authorization: `Basic ${Buffer.from(`x:${key.key}`).toString("base64")}` },
          { authorization: key.key },
          { "x-api-key": key.key }
        ]
        for (const headers of cases) {
          const response = yield* client.request("GET", "/api/v1/agents", { headers })
          assert.strictEqual(response.status, 401, JSON.stringify(headers))
          assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
          assert.strictEqual(response.body.status, 401)
        }
        const ok = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(ok.status, 200)
      })
    )

    it.effect("refuses a session token where an API key is required", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const response = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(account.token) })
        assert.strictEqual(response.status, 401)
      })
    )

    it.effect("a revoked key stops working at once, even after it was cached", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(account)
        const warm = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(warm.status, 200)
        const api = yield* TestServer.apiClient(account.token)
        yield* api.keys.revoke({ params: { id: ApiKeyId.make(key.id) } })
        const after = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(after.status, 401)
        assert.strictEqual((yield* api.keys.list({ query: {} })).total, 0)
        const again = yield* Effect.flip(api.keys.revoke({ params: { id: ApiKeyId.make(key.id) } }))
        assert.instanceOf(again, NotFound)
      })
    )

    it.effect("a key outside its scopes gets 403 naming the scope", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const chatOnly = yield* TestServer.createKey(account, ["chat"])
        const response = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(chatOnly.key) })
        assert.strictEqual(response.status, 403)
        assert.strictEqual(response.body.requiredScope, "read")
        assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
      })
    )

    it.effect("another tenant cannot revoke my key", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const mine = yield* TestServer.signUp()
        const theirs = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(mine)
        const theirApi = yield* TestServer.apiClient(theirs.token)
        const attempt = yield* Effect.flip(theirApi.keys.revoke({ params: { id: ApiKeyId.make(key.id) } }))
        assert.instanceOf(attempt, NotFound)
        const still = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(still.status, 200)
      })
    )
  })
})
