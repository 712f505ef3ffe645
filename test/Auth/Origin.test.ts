import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const foreign = "https://evil.example"

/** Creates an agent with the given headers; the response. */
const createAgent = (headers: Record<string, string>) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/agents", { headers, body: { name: "Origin test" } })
  )

describe("Origin check on cookie-authenticated writes", () => {
  layer(TestServer.layer(), { excludeTestServices: true })((it) => {
    it.effect("a cookie write from a foreign Origin is a 403 problem and changes nothing", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const created = yield* createAgent({ cookie: account.cookie, origin: foreign })
        assert.strictEqual(created.status, 403)
        assert.strictEqual(created.headers.get("content-type"), "application/problem+json")
        assert.match(created.body.detail, /origin/i)

        const { id } = yield* TestServer.createKey(account)
        const revoked = yield* client.request("DELETE", `/api/keys/${id}`, {
          headers: { cookie: account.cookie, origin: "null" }
        })
        assert.strictEqual(revoked.status, 403)
        const logout = yield* client.request("POST", "/api/auth/logout", {
          headers: { cookie: account.cookie, origin: foreign }
        })
        assert.strictEqual(logout.status, 403)

        const listed = yield* client.request("GET", "/api/agents", { headers: TestServer.bearer(account.token) })
        assert.strictEqual(listed.body.total, 0)
        const keys = yield* client.request("GET", "/api/keys", { headers: TestServer.bearer(account.token) })
        assert.strictEqual(keys.body.total, 1)
        // Reads are not writes: a foreign page cannot read the answer anyway (no CORS).
        const read = yield* client.request("GET", "/api/agents", {
          headers: { cookie: account.cookie, origin: foreign }
        })
        assert.strictEqual(read.status, 200)
      })
    )

    it.effect("same-origin cookie writes, bearer-token writes and writes without Origin pass", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const own = client.baseUrl
        assert.strictEqual((yield* createAgent({ cookie: account.cookie, origin: own })).status, 201)
        // Behind a proxy that reports the scheme and host the browser used.
        assert.strictEqual(
          (yield* createAgent({
            cookie: account.cookie,
            origin: "https://agents.example.com",
            "x-forwarded-proto": "https",
            "x-forwarded-host": "agents.example.com"
          })).status,
          201
        )
        // A bearer token is not sent by the browser on its own: any Origin is fine, even with a cookie.
        assert.strictEqual((yield* createAgent({ ...TestServer.bearer(account.token), origin: foreign })).status, 201)
        assert.strictEqual(
          (yield* createAgent({ ...TestServer.bearer(account.token), cookie: account.cookie, origin: foreign })).status,
          201
        )
        // No Origin: a non-browser client with a cookie jar.
        assert.strictEqual((yield* createAgent({ cookie: account.cookie })).status, 201)
        // ...unless the browser's fetch metadata says the request is cross-site.
        const crossSite = yield* createAgent({ cookie: account.cookie, "sec-fetch-site": "cross-site" })
        assert.strictEqual(crossSite.status, 403)
      })
    )
  })

  layer(TestServer.layer({ allowedOrigins: ["https://app.example.com"] }), { excludeTestServices: true })((it) => {
    it.effect("ALLOWED_ORIGINS admits the listed origins besides the service's own", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        assert.strictEqual(
          (yield* createAgent({ cookie: account.cookie, origin: "https://app.example.com" })).status,
          201
        )
        assert.strictEqual((yield* createAgent({ cookie: account.cookie, origin: client.baseUrl })).status, 201)
        assert.strictEqual(
          (yield* createAgent({ cookie: account.cookie, origin: "https://other.example.com" })).status,
          403
        )
      })
    )
  })
})
