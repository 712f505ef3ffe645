import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

layer(TestServer.layer({ apiKeyLastUsedFlush: Duration.millis(100) }), { excludeTestServices: true })(
  "API key expiry and last use",
  (it) => {
    describe("expiresAt", () => {
      it.effect("a key works until its expiry and is refused with 401 from then on, cached or not", () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const account = yield* TestServer.signUp()
          const session = TestServer.bearer(account.token)
          const expiresAt = new Date(Date.now() + 4_000).toISOString()
          const created = yield* client.request("POST", "/api/keys", {
            headers: session,
            body: { name: "short", expiresAt }
          })
          assert.strictEqual(created.status, 201, created.text)
          assert.strictEqual(created.body.expiresAt, expiresAt)
          const key = TestServer.bearer(created.body.key)
          // Used (and cached) before it expires.
          const before = yield* client.request("GET", "/api/v1/agents", { headers: key })
          assert.strictEqual(before.status, 200)
          const refusedAt = yield* TestServer.waitFor(
            "the key to expire",
            Effect.gen(function* () {
              const response = yield* client.request("GET", "/api/v1/agents", { headers: key })
              if (response.status === 200) return undefined
              assert.strictEqual(response.status, 401, response.text)
              assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
              return Date.now()
            })
          )
          assert.isAtLeast(refusedAt, Date.parse(expiresAt))
          // The list still shows it, with its expiry, until it is revoked.
          const list = yield* client.request("GET", "/api/keys", { headers: session })
          assert.strictEqual(list.body.data[0].expiresAt, expiresAt)

          const forever = yield* client.request("POST", "/api/keys", {
            headers: session,
            body: { name: "forever", expiresAt: null }
          })
          assert.strictEqual(forever.status, 201, forever.text)
          assert.isNull(forever.body.expiresAt)
          const omitted = yield* client.request("POST", "/api/keys", { headers: session, body: { name: "omitted" } })
          assert.isNull(omitted.body.expiresAt)
        })
      )

      it.effect("an expiry in the past, too far ahead or not an ISO date-time is a 400 naming expiresAt", () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const account = yield* TestServer.signUp()
          const session = TestServer.bearer(account.token)
          const cases: ReadonlyArray<readonly [unknown, RegExp]> = [
            [new Date(Date.now() - 60_000).toISOString(), /in the future/],
            [new Date(Date.now() + 3_651 * 86_400_000).toISOString(), /3650 days/],
            ["2030-01-01", /ISO 8601/],
            ["tomorrow", /ISO 8601/],
            ["2030-02-31T00:00:00Z", /ISO 8601/],
            ["2030-01-01T24:00:00Z", /ISO 8601/],
            [1_900_000_000_000, /string/]
          ]
          for (const [expiresAt, why] of cases) {
            const response = yield* client.request("POST", "/api/keys", {
              headers: session,
              body: { name: "k", expiresAt }
            })
            assert.strictEqual(response.status, 400, `${JSON.stringify(expiresAt)}: ${response.text}`)
            assert.deepStrictEqual(
              response.body.errors.map((error: any) => error.path),
              [["payload", "expiresAt"]]
            )
            assert.match(response.body.errors[0].message, why, String(expiresAt))
          }
          const list = yield* client.request("GET", "/api/keys", { headers: session })
          assert.strictEqual(list.body.total, 0)
        })
      )
    })

    describe("lastUsedAt", () => {
      it.effect("is null until the key is used, then shows the time of its latest use", () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const account = yield* TestServer.signUp()
          const session = TestServer.bearer(account.token)
          const used = yield* TestServer.createKey(account)
          const unused = yield* TestServer.createKey(account)
          const listed = yield* client.request("GET", "/api/keys", { headers: session })
          for (const key of listed.body.data) assert.isNull(key.lastUsedAt)

          const firstUse = Date.now()
          const first = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(used.key) })
          assert.strictEqual(first.status, 200)
          const lastUsedOf = (id: string) =>
            client
              .request("GET", "/api/keys", { headers: session })
              .pipe(Effect.map((list) => list.body.data.find((key: any) => key.id === id)?.lastUsedAt as string | null))
          const recorded = yield* TestServer.waitFor(
            "the first use to be recorded",
            lastUsedOf(used.id).pipe(Effect.map((at) => (at === null ? undefined : Date.parse(at))))
          )
          assert.isAtLeast(recorded, firstUse - 1_000)
          assert.isAtMost(recorded, Date.now())
          assert.isNull(yield* lastUsedOf(unused.id))

          // A later use moves it on.
          const secondUse = Date.now()
          yield* TestServer.waitFor(
            "a later use to be recorded",
            Effect.gen(function* () {
              yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(used.key) })
              const at = yield* lastUsedOf(used.id)
              return at !== null && Date.parse(at) >= secondUse ? at : undefined
            })
          )
        })
      )
    })
  }
)
