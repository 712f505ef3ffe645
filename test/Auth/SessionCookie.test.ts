import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Http from "node:http"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

interface RawResponse {
  readonly status: number
  readonly setCookies: ReadonlyArray<string>
  readonly headers: Http.IncomingHttpHeaders
  readonly body: any
}

/** A request with any Host header (fetch always sends the URL's own). */
const raw = (method: string, path: string, headers: Record<string, string>, body?: unknown) =>
  Effect.flatMap(TestClient, (client) =>
    Effect.promise(
      () =>
        new Promise<RawResponse>((resolve, reject) => {
          const url = new URL(client.baseUrl + path)
          const payload = body === undefined ? undefined : JSON.stringify(body)
          const request = Http.request(
            {
              host: url.hostname,
              port: url.port,
              method,
              path,
              headers: { ...headers, ...(payload === undefined ? {} : { "content-type": "application/json" }) }
            },
            (response) => {
              const chunks: Array<Buffer> = []
              response.on("data", (chunk: Buffer) => chunks.push(chunk))
              response.on("end", () => {
                const text = Buffer.concat(chunks).toString("utf8")
                resolve({
                  status: response.statusCode ?? 0,
                  setCookies: response.headers["set-cookie"] ?? [],
                  headers: response.headers,
                  body: text === "" ? undefined : JSON.parse(text)
                })
              })
            }
          )
          request.on("error", reject)
          request.end(payload)
        })
    )
  )

const newAccount = Effect.gen(function* () {
  const account = yield* TestServer.signUp()
  return { email: account.email, password: account.password }
})

const cookieNamed = (setCookies: ReadonlyArray<string>, name: string) =>
  setCookies.find((cookie) => cookie.startsWith(`${name}=`))

describe("the session cookie", () => {
  layer(TestServer.layer(), { excludeTestServices: true })("COOKIE_SECURE unset", (it) => {
    it.effect(
      "over plain HTTP to localhost it is `session`, without Secure, so a browser on http://localhost keeps it",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const port = new URL(client.baseUrl).port
          const credentials = yield* newAccount
          for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, "LOCALHOST"]) {
            const login = yield* raw("POST", "/api/auth/login", { host }, credentials)
            assert.strictEqual(login.status, 200, host)
            assert.lengthOf(login.setCookies, 1, host)
            const cookie = login.setCookies[0]!
            assert.match(cookie, /^session=st_/, host)
            assert.notMatch(cookie, /;\s*Secure/i, host)
            assert.match(cookie, /;\s*HttpOnly/i, host)
            assert.match(cookie, /;\s*SameSite=Lax/i, host)
            assert.match(cookie, /;\s*Path=\//, host)
            // Plain HTTP: no HSTS either.
            assert.isUndefined(login.headers["strict-transport-security"], host)
          }
        })
    )

    it.effect(
      "anywhere else, or over HTTPS behind a proxy, it is `__Host-session` with Secure, Path=/ and no Domain",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const port = new URL(client.baseUrl).port
          const credentials = yield* newAccount
          const cases: ReadonlyArray<Record<string, string>> = [
            { host: "agents.example.com" },
            { host: `localhost:${port}`, "x-forwarded-proto": "https" },
            { host: `127.0.0.1:${port}`, "x-forwarded-host": "agents.example.com" },
            { host: "10.0.0.7:3000", "x-forwarded-proto": "http" }
          ]
          for (const headers of cases) {
            const what = JSON.stringify(headers)
            const login = yield* raw("POST", "/api/auth/login", headers, credentials)
            assert.strictEqual(login.status, 200, what)
            assert.lengthOf(login.setCookies, 1, what)
            const cookie = login.setCookies[0]!
            assert.match(cookie, /^__Host-session=st_/, what)
            assert.match(cookie, /;\s*Secure/i, what)
            assert.match(cookie, /;\s*HttpOnly/i, what)
            assert.match(cookie, /;\s*Path=\/(;|$)/, what)
            assert.notMatch(cookie, /;\s*Domain=/i, what)
          }
        })
    )

    it.effect("`__Host-session` authenticates reads and same-origin writes, and logout expires it", () =>
      Effect.gen(function* () {
        const credentials = yield* newAccount
        const site = { host: "agents.example.com", "x-forwarded-proto": "https" }
        const login = yield* raw("POST", "/api/auth/login", site, credentials)
        const cookie = cookieNamed(login.setCookies, "__Host-session")!.split(";")[0]!

        const me = yield* raw("GET", "/api/auth/me", { ...site, cookie })
        assert.strictEqual(me.status, 200)
        assert.strictEqual(me.body.user.email, credentials.email)
        const created = yield* raw(
          "POST",
          "/api/agents",
          { ...site, cookie, origin: "https://agents.example.com" },
          {
            name: "From the browser"
          }
        )
        assert.strictEqual(created.status, 201)
        const foreign = yield* raw(
          "POST",
          "/api/agents",
          { ...site, cookie, origin: "https://evil.example" },
          { name: "x" }
        )
        assert.strictEqual(foreign.status, 403)

        const logout = yield* raw("POST", "/api/auth/logout", { ...site, cookie, origin: "https://agents.example.com" })
        assert.strictEqual(logout.status, 204)
        const expired = cookieNamed(logout.setCookies, "__Host-session")
        assert.isDefined(expired)
        assert.match(expired!, /^__Host-session=;/)
        assert.match(expired!, /Max-Age=0|Expires=Thu, 01 Jan 1970/i)
        // A browser accepts the deletion of a __Host- cookie only with Secure and Path=/.
        assert.match(expired!, /;\s*Secure/i)
        assert.match(expired!, /;\s*Path=\//)
        assert.isUndefined(cookieNamed(logout.setCookies, "session"))
        assert.strictEqual((yield* raw("GET", "/api/auth/me", { ...site, cookie })).status, 401)
      })
    )

    it.effect(
      "either name is accepted anywhere, `__Host-session` first; logout expires every session cookie sent",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const credentials = yield* newAccount
          const login = yield* client.request("POST", "/api/auth/login", { body: credentials })
          const token = login.body.token as string
          const site = { host: "agents.example.com", "x-forwarded-proto": "https" }
          // A session cookie from before the upgrade, sent to a public name.
          assert.strictEqual((yield* raw("GET", "/api/auth/me", { ...site, cookie: `session=${token}` })).status, 200)
          assert.strictEqual(
            (yield* raw("GET", "/api/auth/me", { ...site, cookie: `session=st_garbage; __Host-session=${token}` }))
              .status,
            200
          )
          const shadowed = yield* raw("GET", "/api/auth/me", {
            ...site,
            cookie: `__Host-session=st_garbage; session=${token}`
          })
          assert.strictEqual(shadowed.status, 401)
          assert.strictEqual(shadowed.headers["content-type"], "application/problem+json")

          const logout = yield* client.request("POST", "/api/auth/logout", {
            headers: { cookie: `session=${token}; __Host-session=${token}` }
          })
          assert.strictEqual(logout.status, 204)
          const setCookies = logout.headers.getSetCookie()
          assert.match(cookieNamed(setCookies, "session") ?? "", /^session=;.*(Max-Age=0|Expires=Thu, 01 Jan 1970)/i)
          assert.notMatch(cookieNamed(setCookies, "session")!, /;\s*Secure/i)
          assert.match(cookieNamed(setCookies, "__Host-session") ?? "", /^__Host-session=;.*;\s*Secure/i)
        })
    )
  })

  layer(TestServer.layer({ cookieSecure: true }), { excludeTestServices: true })("COOKIE_SECURE=true", (it) => {
    it.effect("always `__Host-session` with Secure, and HSTS, even on localhost", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const login = yield* client.request("POST", "/api/auth/login", { body: yield* newAccount })
        assert.strictEqual(login.status, 200)
        const cookie = login.headers.get("set-cookie") ?? ""
        assert.match(cookie, /^__Host-session=st_/)
        assert.match(cookie, /;\s*Secure/i)
        assert.match(login.headers.get("strict-transport-security") ?? "", /^max-age=\d+/)
      })
    )
  })

  layer(TestServer.layer({ cookieSecure: false }), { excludeTestServices: true })("COOKIE_SECURE=false", (it) => {
    it.effect("always `session` without Secure, even on a public name, and no HSTS", () =>
      Effect.gen(function* () {
        const login = yield* raw("POST", "/api/auth/login", { host: "agents.example.com" }, yield* newAccount)
        assert.strictEqual(login.status, 200)
        assert.lengthOf(login.setCookies, 1)
        assert.match(login.setCookies[0]!, /^session=st_/)
        assert.notMatch(login.setCookies[0]!, /;\s*Secure/i)
        assert.isUndefined(login.headers["strict-transport-security"])
      })
    )
  })
})

/** A schema of the OpenAPI document, its `$ref` followed. */
const resolve = (document: any, schema: any): any =>
  schema?.$ref === undefined ? schema : resolve(document, document.components.schemas[schema.$ref.split("/").pop()])

layer(TestServer.layer(), { excludeTestServices: true })("the session token in the login body", (it) => {
  it.effect("API clients (neither Origin nor Sec-Fetch-Site) get it, and it works as a bearer token", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const credentials = yield* newAccount
      for (const body of [credentials, { ...credentials, returnToken: false }]) {
        const login = yield* client.request("POST", "/api/auth/login", { body })
        assert.strictEqual(login.status, 200)
        assert.match(login.body.token, /^st_[A-Za-z0-9_-]{43}$/)
        const me = yield* client.request("GET", "/api/auth/me", { headers: TestServer.bearer(login.body.token) })
        assert.strictEqual(me.status, 200)
      }
    })
  )

  it.effect("a browser's login gets the cookie but no token, unless it asks with returnToken", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const credentials = yield* newAccount
      const browsers: ReadonlyArray<Record<string, string>> = [
        { origin: client.baseUrl, "sec-fetch-site": "same-origin" },
        { origin: client.baseUrl },
        { "sec-fetch-site": "same-origin" },
        { "sec-fetch-site": "none" }
      ]
      for (const headers of browsers) {
        const what = JSON.stringify(headers)
        const login = yield* client.request("POST", "/api/auth/login", { headers, body: credentials })
        assert.strictEqual(login.status, 200, what)
        assert.notProperty(login.body, "token", what)
        assert.notInclude(login.text, "st_", what)
        assert.deepStrictEqual(Object.keys(login.body).sort(), ["expiresAt", "user"], what)
        assert.strictEqual(login.body.user.email, credentials.email, what)
        const cookie = (login.headers.get("set-cookie") ?? "").split(";")[0]!
        assert.match(cookie, /^session=st_/, what)
        const me = yield* client.request("GET", "/api/auth/me", { headers: { cookie } })
        assert.strictEqual(me.status, 200, what)
      }

      const asked = yield* client.request("POST", "/api/auth/login", {
        headers: { origin: client.baseUrl, "sec-fetch-site": "same-origin" },
        body: { ...credentials, returnToken: true }
      })
      assert.strictEqual(asked.status, 200)
      assert.match(asked.body.token, /^st_/)
      const me = yield* client.request("GET", "/api/auth/me", { headers: TestServer.bearer(asked.body.token) })
      assert.strictEqual(me.status, 200)

      const notBoolean = yield* client.request("POST", "/api/auth/login", {
        body: { ...credentials, returnToken: "yes" }
      })
      assert.strictEqual(notBoolean.status, 400)
      assert.deepStrictEqual(notBoolean.body.errors[0].path, ["payload", "returnToken"])
    })
  )

  it.effect("the OpenAPI document shows the token as optional and returnToken as a field of the login", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const document = (yield* client.request("GET", "/openapi.json")).body
      const login = document.paths["/api/auth/login"].post
      const response = resolve(document, login.responses["200"].content["application/json"].schema)
      assert.property(response.properties, "token")
      assert.notInclude(response.required ?? [], "token")
      assert.includeMembers(response.required ?? [], ["expiresAt", "user"])
      const request = resolve(document, login.requestBody.content["application/json"].schema)
      assert.property(request.properties, "returnToken")
      assert.notInclude(request.required ?? [], "returnToken")
    })
  )
})
