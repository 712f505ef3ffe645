import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Unauthorized } from "../../src/Domain/Problems.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

layer(TestServer.layer(), { excludeTestServices: true })("accounts and sessions", (it) => {
  describe("register", () => {
    it.effect("creates a tenant on the free plan with the user as owner", () =>
      Effect.gen(function* () {
        const api = yield* TestServer.apiClient()
        const [account, response] = yield* api.auth.register({
          payload: { email: "owner@example.com", password: "12345678" },
          responseMode: "decoded-and-response"
        })
        assert.strictEqual(response.status, 201)
        // The bytes as sent, not only what the client decodes: nothing more than the account.
        const wire = yield* response.text
        assert.deepStrictEqual(Object.keys(JSON.parse(wire)).sort(), ["tenant", "user"])
        assert.notInclude(wire, "passwordHash")
        assert.strictEqual(account.user.email, "owner@example.com")
        assert.strictEqual(account.user.name, null)
        assert.strictEqual(account.tenant.plan, "free")
        assert.isString(account.tenant.id)
      })
    )

    it.effect("refuses a duplicate e-mail, whatever its case, with 409", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const api = yield* TestServer.apiClient()
        const [, first] = yield* api.auth.register({
          payload: { email: "twice@example.com", password: "12345678" },
          responseMode: "decoded-and-response"
        })
        assert.strictEqual(first.status, 201)
        // The problem's wire format (its content type) is checked on the raw answer.
        const second = yield* client.request("POST", "/api/auth/register", {
          body: { email: "TWICE@example.com", password: "abcdefgh" }
        })
        assert.strictEqual(second.status, 409)
        assert.strictEqual(second.headers.get("content-type"), "application/problem+json")
        assert.strictEqual(second.body.status, 409)
      })
    )

    it.effect("names the bad field: invalid e-mail, short password, missing field", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const badEmail = yield* client.request("POST", "/api/auth/register", {
          body: { email: "not-an-email", password: "12345678" }
        })
        assert.strictEqual(badEmail.status, 400)
        assert.strictEqual(badEmail.headers.get("content-type"), "application/problem+json")
        assert.deepStrictEqual(
          badEmail.body.errors.map((e: { path: Array<string> }) => e.path),
          [["payload", "email"]]
        )

        const shortPassword = yield* client.request("POST", "/api/auth/register", {
          body: { email: "short@example.com", password: "1234567" }
        })
        assert.strictEqual(shortPassword.status, 400)
        assert.deepStrictEqual(shortPassword.body.errors[0].path, ["payload", "password"])
        assert.include(shortPassword.body.errors[0].message, "8 characters")

        const missing = yield* client.request("POST", "/api/auth/register", { body: { password: "12345678" } })
        assert.strictEqual(missing.status, 400)
        assert.deepStrictEqual(missing.body.errors[0].path, ["payload", "email"])
      })
    )
  })

  describe("login", () => {
    it.effect("returns a token, its expiry and the user, and sets an HttpOnly session cookie", () =>
      Effect.gen(function* () {
        const api = yield* TestServer.apiClient()
        yield* api.auth.register({ payload: { email: "login@example.com", password: "12345678", name: "Lou" } })
        const [login, response] = yield* api.auth.login({
          payload: { email: "login@example.com", password: "12345678" },
          responseMode: "decoded-and-response"
        })
        assert.strictEqual(response.status, 200)
        assert.match(login.token ?? "", /^st_[A-Za-z0-9_-]{43}$/)
        assert.strictEqual(login.user.name, "Lou")
        const expiresIn = login.expiresAt.getTime() - Date.now()
        assert.isTrue(expiresIn > 6.9 * 86_400_000 && expiresIn <= 7 * 86_400_000)
        const cookie = response.headers["set-cookie"] ?? ""
        assert.match(cookie, /^session=st_/)
        assert.match(cookie, /HttpOnly/i)
        assert.match(cookie, /SameSite=Lax/i)
        assert.match(cookie, /Path=\//)
        assert.notMatch(cookie, /Secure/i)

        const viaCookie = yield* TestServer.apiClient(cookie.split(";")[0]!, "cookie")
        const me = yield* viaCookie.auth.me()
        assert.strictEqual(me.user.email, "login@example.com")
        assert.strictEqual(me.tenant.plan, "free")
      })
    )

    it.effect("answers an unknown e-mail and a wrong password with the same 401", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const api = yield* TestServer.apiClient()
        yield* api.auth.register({ payload: { email: "known@example.com", password: "12345678" } })
        // Raw: the two answers are compared byte for byte, headers included.
        const wrongPassword = yield* client.request("POST", "/api/auth/login", {
          body: { email: "known@example.com", password: "87654321" }
        })
        const unknownEmail = yield* client.request("POST", "/api/auth/login", {
          body: { email: "unknown@example.com", password: "87654321" }
        })
        assert.strictEqual(wrongPassword.status, 401)
        assert.strictEqual(unknownEmail.status, 401)
        assert.deepStrictEqual(wrongPassword.body, unknownEmail.body)
        assert.isNull(wrongPassword.headers.get("set-cookie"))
      })
    )
  })

  describe("logout", () => {
    it.effect("revokes the bearer session server-side", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const before = yield* api.auth.me()
        assert.strictEqual(before.user.email, account.email)
        const [, logout] = yield* api.auth.logout({ responseMode: "decoded-and-response" })
        assert.strictEqual(logout.status, 204)
        // Raw: the refusal's content type is part of what is checked.
        const after = yield* client.request("GET", "/api/auth/me", { headers: TestServer.bearer(account.token) })
        assert.strictEqual(after.status, 401)
        assert.strictEqual(after.headers.get("content-type"), "application/problem+json")
      })
    )

    it.effect("revokes the cookie session and expires the cookie", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.cookie, "cookie")
        const [, logout] = yield* api.auth.logout({ responseMode: "decoded-and-response" })
        assert.strictEqual(logout.status, 204)
        assert.match(logout.headers["set-cookie"] ?? "", /^session=;.*(Max-Age=0|Expires=Thu, 01 Jan 1970)/i)
        const after = yield* Effect.flip(api.auth.me())
        assert.instanceOf(after, Unauthorized)
        assert.strictEqual(after.status, 401)
      })
    )

    it.effect("refuses management routes without a session, or with an API key instead", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(account)
        const none = yield* client.request("GET", "/api/agents")
        assert.strictEqual(none.status, 401)
        const withKey = yield* client.request("GET", "/api/agents", { headers: TestServer.bearer(key.key) })
        assert.strictEqual(withKey.status, 401)
        const garbage = yield* client.request("GET", "/api/agents", { headers: TestServer.bearer("st_nope") })
        assert.strictEqual(garbage.status, 401)
      })
    )
  })
})

layer(TestServer.layer({ cookieSecure: true }), { excludeTestServices: true })("behind HTTPS", (it) => {
  it.effect("COOKIE_SECURE names the session cookie __Host-session and marks it Secure", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const api = yield* TestServer.apiClient()
      const [, login] = yield* api.auth.login({
        payload: { email: account.email, password: account.password },
        responseMode: "decoded-and-response"
      })
      assert.match(login.headers["set-cookie"] ?? "", /^__Host-session=st_/)
      assert.match(login.headers["set-cookie"] ?? "", /;\s*Secure/i)
    })
  )
})
