import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as TestServer from "./support/TestServer.ts"
import { TestClient } from "./support/TestServer.ts"

// The path a new user takes: register, log in, create an API key and an
// agent, then list it over /api/v1 with the key.
layer(TestServer.layer(), { excludeTestServices: true })("foundation", (it) => {
  describe("register -> login -> key -> agent -> /api/v1/agents", () => {
    it.effect("lists the new agent with the new key", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const registered = yield* client.request("POST", "/api/auth/register", {
          body: { email: "Founder@Example.com", password: "a long enough password", name: "Founder" }
        })
        assert.strictEqual(registered.status, 201)
        assert.strictEqual(registered.body.user.email, "Founder@Example.com")
        assert.strictEqual(registered.body.tenant.plan, "free")

        const login = yield* client.request("POST", "/api/auth/login", {
          body: { email: "founder@example.com", password: "a long enough password" }
        })
        assert.strictEqual(login.status, 200)
        const token = login.body.token as string
        assert.match(token, /^st_/)

        const key = yield* client.request("POST", "/api/keys", {
          headers: TestServer.bearer(token),
          body: { name: "production" }
        })
        assert.strictEqual(key.status, 201)
        assert.match(key.body.key, /^ak_[A-Za-z0-9_-]{43}$/)

        const agent = yield* client.request("POST", "/api/agents", {
          headers: TestServer.bearer(token),
          body: { name: "Support", description: "Answers questions" }
        })
        assert.strictEqual(agent.status, 201)

        const listed = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.body.key) })
        assert.strictEqual(listed.status, 200)
        assert.strictEqual(listed.body.total, 1)
        // The reference's Agent fields: the instructions stay on the management routes.
        assert.deepStrictEqual(Object.keys(listed.body.data[0]).sort(), [
          "createdAt",
          "description",
          "id",
          "memoryEnabled",
          "model",
          "name",
          "status"
        ])
        assert.strictEqual(listed.body.data[0].id, agent.body.id)
        assert.strictEqual(listed.body.data[0].model, "local")
        assert.strictEqual(listed.body.data[0].status, "active")
        assert.isTrue(new Date(listed.body.data[0].createdAt).toISOString() === listed.body.data[0].createdAt)
      })
    )
  })
})
