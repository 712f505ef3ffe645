import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const problemJson = "application/problem+json"

layer(TestServer.layer({ maxBodyBytes: 4096 }), { excludeTestServices: true })("one error model", (it) => {
  /**
   * An upload was read and taken: 201 with the document when its ingestion ended
   * within the upload's short wait, else 202 with it still processing (a loaded
   * machine); either way the one document named notes.txt.
   */
  const assertAccepted = (status: number, body: any, text: string) => {
    assert.include([201, 202], status, text)
    const documents = status === 201 ? [body] : body.data
    assert.strictEqual(documents.length, 1, text)
    assert.strictEqual(documents[0].filename, "notes.txt", text)
  }

  describe("every error is application/problem+json", () => {
    it.effect("malformed JSON is a 400 naming the payload", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const response = yield* client.request("POST", "/api/auth/register", {
          rawBody: '{"email": ',
          headers: { "content-type": "application/json" }
        })
        assert.strictEqual(response.status, 400)
        assert.strictEqual(response.headers.get("content-type"), problemJson)
        assert.strictEqual(response.body.type, "about:blank")
        assert.strictEqual(response.body.title, "Bad Request")
        assert.strictEqual(response.body.status, 400)
        assert.isString(response.body.detail)
        assert.deepStrictEqual(response.body.errors[0].path, ["payload"])
      })
    )

    it.effect("an unknown route is a 404 problem", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const response = yield* client.request("GET", "/api/nothing-here")
        assert.strictEqual(response.status, 404)
        assert.strictEqual(response.headers.get("content-type"), problemJson)
        assert.strictEqual(response.body.status, 404)
        assert.strictEqual(response.body.title, "Not Found")
      })
    )

    it.effect("a known path under the wrong method is a 405 with Allow", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const response = yield* client.request("PATCH", "/api/agents/0190c1a8-0000-7000-8000-000000000000")
        assert.strictEqual(response.status, 405)
        assert.strictEqual(response.headers.get("content-type"), problemJson)
        assert.strictEqual(response.headers.get("allow"), "GET, PUT, DELETE")
        const login = yield* client.request("GET", "/api/auth/login")
        assert.strictEqual(login.status, 405)
        assert.strictEqual(login.headers.get("allow"), "POST")
      })
    )

    it.effect("a body over the limit is a 413, declared or chunked", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const big = JSON.stringify({ email: "a@example.com", password: "x".repeat(5000) })
        const declared = yield* client.request("POST", "/api/auth/register", {
          rawBody: big,
          headers: { "content-type": "application/json" }
        })
        assert.strictEqual(declared.status, 413)
        assert.strictEqual(declared.headers.get("content-type"), problemJson)
        assert.strictEqual(declared.body.status, 413)

        const chunked = yield* Effect.promise(() =>
          fetch(`${client.baseUrl}/api/auth/register`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: new ReadableStream({
              start(controller) {
                controller.enqueue(new TextEncoder().encode(big))
                controller.close()
              }
            }),
            duplex: "half"
          } as RequestInit)
        )
        assert.strictEqual(chunked.status, 413)
        assert.strictEqual(chunked.headers.get("content-type"), problemJson)
      })
    )

    it.effect("an upload is read under its own, larger limit, chunked or not; other routes keep the body limit", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const auth = TestServer.bearer(account.token)
        const base = yield* client.request("POST", "/api/knowledge", { headers: auth, body: { name: "Docs" } })
        assert.strictEqual(base.status, 201, base.text)
        // About 10 KB of JSON: over MAX_BODY_BYTES (4096 here), well under the upload limit.
        const body = JSON.stringify({ filename: "notes.txt", content: "lantern ".repeat(1200) })
        const declared = yield* client.request("POST", `/api/knowledge/${base.body.id}/upload`, {
          headers: { ...auth, "content-type": "application/json" },
          rawBody: body
        })
        assertAccepted(declared.status, declared.body, declared.text)
        const chunked = yield* Effect.promise(() =>
          fetch(`${client.baseUrl}/api/knowledge/${base.body.id}/upload?duplicates=allow`, {
            method: "POST",
            headers: { ...auth, "content-type": "application/json" },
            body: new ReadableStream({
              start(controller) {
                controller.enqueue(new TextEncoder().encode(body))
                controller.close()
              }
            }),
            duplex: "half"
          } as RequestInit)
        )
        const chunkedText = yield* Effect.promise(() => chunked.text())
        assertAccepted(chunked.status, JSON.parse(chunkedText), chunkedText)
        const elsewhere = yield* client.request("POST", "/api/knowledge", {
          headers: { ...auth, "content-type": "application/json" },
          rawBody: JSON.stringify({ name: "x".repeat(5000) })
        })
        assert.strictEqual(elsewhere.status, 413)
      })
    )

    it.effect("an unsupported content type is a 415 problem", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const response = yield* client.request("POST", "/api/auth/login", {
          rawBody: "email=a",
          headers: { "content-type": "text/plain" }
        })
        assert.strictEqual(response.status, 415)
        assert.strictEqual(response.headers.get("content-type"), problemJson)
      })
    )

    it.effect("an unexpected failure is a 500 with a request id and nothing of its cause", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const sql = yield* SqlClient.SqlClient
        const account = yield* TestServer.signUp()
        yield* sql`ALTER TABLE agents RENAME TO agents_gone`
        const response = yield* client
          .request("GET", "/api/agents", {
            headers: { ...TestServer.bearer(account.token), "x-request-id": "req-500-test" }
          })
          .pipe(Effect.ensuring(Effect.orDie(sql`ALTER TABLE agents_gone RENAME TO agents`)))
        assert.strictEqual(response.status, 500)
        assert.strictEqual(response.headers.get("content-type"), problemJson)
        assert.strictEqual(response.body.requestId, "req-500-test")
        assert.strictEqual(response.headers.get("x-request-id"), "req-500-test")
        assert.notMatch(response.text, /agents|relation|SELECT|at .*\.ts/i)
      })
    )

    it.effect("every response carries a request id", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const response = yield* client.request("GET", "/health/live")
        assert.match(response.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/)
      })
    )
  })

  describe("docs and health", () => {
    it.effect("GET /openapi.json is OpenAPI 3.1 with integers and the security schemes", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const response = yield* client.request("GET", "/openapi.json")
        assert.strictEqual(response.status, 200)
        const doc = response.body
        assert.match(doc.openapi, /^3\.1\./)
        assert.deepStrictEqual(Object.keys(doc.components.securitySchemes).sort(), [
          "apiKeyBearer",
          "apiKeyHeader",
          "sessionCookie",
          "sessionToken"
        ])
        assert.deepStrictEqual(doc.paths["/api/v1/agents"].get.security, [{ apiKeyBearer: [] }])
        const listSchema = JSON.stringify(doc.paths["/api/v1/agents"].get.responses["200"])
        const resolved = listSchema.includes("$ref") ? JSON.stringify(doc.components.schemas) : listSchema
        assert.include(resolved, '"total":{"type":"integer"')
        assert.property(doc.paths, "/api/auth/register")
        assert.property(doc.paths, "/api/keys/{id}")
      })
    )

    it.effect("GET /docs serves the reference without loading anything from the network", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const response = yield* client.request("GET", "/docs")
        assert.strictEqual(response.status, 200)
        assert.match(response.headers.get("content-type") ?? "", /text\/html/)
        assert.notMatch(response.text, /<script[^>]+src="https?:/)
        assert.isAbove(response.text.length, 100_000)
      })
    )

    it.effect("health: live always, ready when the database answers", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const live = yield* client.request("GET", "/health/live")
        assert.deepStrictEqual([live.status, live.body], [200, { status: "ok" }])
        const ready = yield* client.request("GET", "/health/ready")
        assert.deepStrictEqual([ready.status, ready.body], [200, { status: "ok" }])
      })
    )
  })
})
