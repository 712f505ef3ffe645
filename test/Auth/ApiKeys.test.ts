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
        const [list, response] = yield* api.keys.list({ responseMode: "decoded-and-response" })
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
        assert.strictEqual((yield* api.keys.list()).total, 0)
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
