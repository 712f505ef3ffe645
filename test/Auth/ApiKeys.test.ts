import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

layer(TestServer.layer(), { excludeTestServices: true })("API keys", (it) => {
  describe("management", () => {
    it.effect("shows the plaintext once; the list has no key, only its prefix", () =>
      Effect.gen(function*() {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const created = yield* client.request("POST", "/api/keys", {
          headers: TestServer.bearer(account.token),
          body: { name: "ci", scopes: ["read", "chat"] }
        })
        assert.strictEqual(created.status, 201)
        assert.match(created.body.key, /^ak_/)
        assert.strictEqual(created.body.prefix, created.body.key.slice(0, 11))
        assert.deepStrictEqual(created.body.scopes, ["read", "chat"])

        const list = yield* client.request("GET", "/api/keys", { headers: TestServer.bearer(account.token) })
        assert.strictEqual(list.status, 200)
        assert.strictEqual(list.body.total, 1)
        assert.notProperty(list.body.data[0], "key")
        assert.notInclude(list.text, created.body.key)
        assert.strictEqual(list.body.data[0].prefix, created.body.prefix)
      }))

    it.effect("gives a key without a scopes list every scope", () =>
      Effect.gen(function*() {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const created = yield* client.request("POST", "/api/keys", {
          headers: TestServer.bearer(account.token),
          body: { name: "all" }
        })
        assert.deepStrictEqual(created.body.scopes, ["read", "chat", "execute", "teams"])
      }))

    it.effect("rejects unknown scopes, an empty scopes list and a missing name with 400", () =>
      Effect.gen(function*() {
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
      }))
  })

  describe("authentication on /api/v1", () => {
    it.effect("401 for a missing, malformed, unknown or non-bearer key", () =>
      Effect.gen(function*() {
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
      }))

    it.effect("refuses a session token where an API key is required", () =>
      Effect.gen(function*() {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const response = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(account.token) })
        assert.strictEqual(response.status, 401)
      }))

    it.effect("a revoked key stops working at once, even after it was cached", () =>
      Effect.gen(function*() {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(account)
        const warm = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(warm.status, 200)
        const revoked = yield* client.request("DELETE", `/api/keys/${key.id}`, {
          headers: TestServer.bearer(account.token)
        })
        assert.strictEqual(revoked.status, 204)
        const after = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(after.status, 401)
        const list = yield* client.request("GET", "/api/keys", { headers: TestServer.bearer(account.token) })
        assert.strictEqual(list.body.total, 0)
        const again = yield* client.request("DELETE", `/api/keys/${key.id}`, { headers: TestServer.bearer(account.token) })
        assert.strictEqual(again.status, 404)
      }))

    it.effect("a key outside its scopes gets 403 naming the scope", () =>
      Effect.gen(function*() {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const chatOnly = yield* TestServer.createKey(account, ["chat"])
        const response = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(chatOnly.key) })
        assert.strictEqual(response.status, 403)
        assert.strictEqual(response.body.requiredScope, "read")
        assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
      }))

    it.effect("another tenant cannot revoke my key", () =>
      Effect.gen(function*() {
        const client = yield* TestClient
        const mine = yield* TestServer.signUp()
        const theirs = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(mine)
        const attempt = yield* client.request("DELETE", `/api/keys/${key.id}`, { headers: TestServer.bearer(theirs.token) })
        assert.strictEqual(attempt.status, 404)
        const still = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(still.status, 200)
      }))
  })
})
