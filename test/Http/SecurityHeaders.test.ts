import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import * as TestServer from "../support/TestServer.ts"
import { type TestResponse, TestClient } from "../support/TestServer.ts"

/** The headers every response must carry, whatever its status. */
const assertHardened = (response: TestResponse, what: string) => {
  assert.strictEqual(response.headers.get("x-content-type-options"), "nosniff", what)
  assert.strictEqual(response.headers.get("cache-control"), "no-store", what)
  assert.include(response.headers.get("content-security-policy") ?? "", "frame-ancestors 'none'", what)
  assert.strictEqual(response.headers.get("x-frame-options"), "DENY", what)
  assert.strictEqual(response.headers.get("referrer-policy"), "no-referrer", what)
}

describe("security headers", () => {
  layer(TestServer.layer(), { excludeTestServices: true })((it) => {
    it.effect("responses with tokens, keys and tenants' data are neither cached nor sniffed nor framed", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const email = `user-${Crypto.randomBytes(6).toString("hex")}@example.com`
        const password = "correct horse battery staple"
        const registered = yield* client.request("POST", "/api/auth/register", { body: { email, password, name: "H" } })
        assert.strictEqual(registered.status, 201)
        assertHardened(registered, "register")
        const login = yield* client.request("POST", "/api/auth/login", { body: { email, password } })
        assert.strictEqual(login.status, 200)
        assertHardened(login, "login (session token)")
        const token = login.body.token as string

        const key = yield* client.request("POST", "/api/keys", {
          headers: TestServer.bearer(token),
          body: { name: "k" }
        })
        assert.strictEqual(key.status, 201)
        assertHardened(key, "key creation (plaintext key)")
        const agents = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key.body.key) })
        assert.strictEqual(agents.status, 200)
        assertHardened(agents, "an authenticated /api/v1 read")
        const me = yield* client.request("GET", "/api/auth/me", { headers: TestServer.bearer(token) })
        assertHardened(me, "an authenticated /api read")

        // Errors too, including those the router and the pipeline make.
        assertHardened(yield* client.request("GET", "/api/agents"), "401")
        assertHardened(yield* client.request("GET", "/no/such/route"), "404")
        assertHardened(yield* client.request("GET", "/health/live"), "health")
        // Not served over HTTPS (COOKIE_SECURE off): no HSTS.
        assert.isNull(login.headers.get("strict-transport-security"))
      })
    )

    it.effect("/docs, on the cookie's origin, may run only its own inline scripts, each listed by its sha256", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const docs = yield* client.request("GET", "/docs")
        assert.strictEqual(docs.status, 200)
        assertHardened(docs, "/docs")
        const policy = docs.headers.get("content-security-policy") ?? ""
        const directives = new Map(
          policy.split(";").map((directive) => {
            const [name = "", ...values] = directive.trim().split(/\s+/)
            return [name, values] as const
          })
        )
        for (const [name, value] of [
          ["frame-ancestors", "'none'"],
          ["base-uri", "'none'"],
          ["object-src", "'none'"],
          ["form-action", "'self'"]
        ]) {
          assert.deepStrictEqual(directives.get(name!), [value], name)
        }
        const scriptSrc = directives.get("script-src") ?? []
        assert.notInclude(scriptSrc, "'unsafe-inline'")
        assert.notInclude(scriptSrc, "'unsafe-eval'")

        // Every <script> in the page is inline (it works offline) and its hash is listed; nothing else is.
        // As the browser reads it: a script's text runs to the first `</script`, whatever `<script` it holds.
        const scripts: Array<{ readonly attributes: string; readonly text: string }> = []
        const lower = docs.text.toLowerCase()
        for (let at = lower.indexOf("<script"); at >= 0; at = lower.indexOf("<script", at)) {
          const open = lower.indexOf(">", at)
          const close = lower.indexOf("</script", open)
          assert.isAbove(close, open, "every script is closed")
          scripts.push({ attributes: docs.text.slice(at + 7, open), text: docs.text.slice(open + 1, close) })
          at = close
        }
        assert.isAtLeast(scripts.length, 2, "Scalar's bundle and the script that starts it")
        const expected = scripts.map(({ attributes, text }) => {
          assert.notMatch(attributes, /\ssrc\s*=/i, "no script is loaded from elsewhere")
          return `'sha256-${Crypto.createHash("sha256").update(text, "utf8").digest("base64")}'`
        })
        assert.sameMembers(scriptSrc, [...new Set(expected)])

        // The policy is computed once and served again as is.
        const again = yield* client.request("GET", "/docs")
        assert.strictEqual(again.headers.get("content-security-policy"), policy)
      })
    )
  })

  layer(TestServer.layer({ cookieSecure: true }), { excludeTestServices: true })((it) => {
    it.effect("behind HTTPS (COOKIE_SECURE=true) responses also carry HSTS", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const live = yield* client.request("GET", "/health/live")
        assert.match(live.headers.get("strict-transport-security") ?? "", /^max-age=\d+/)
      })
    )
  })
})
