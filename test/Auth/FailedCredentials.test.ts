import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Crypto from "node:crypto"
import { newId } from "../../src/Domain/Ids.ts"
import { sample } from "../support/Prometheus.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const failuresPerAddress = 5

// Well-formed, so each one is looked up; nobody holds them.
const randomKey = () => `ak_${Crypto.randomBytes(32).toString("base64url")}`
const randomToken = () => `st_${Crypto.randomBytes(32).toString("base64url")}`
const sha256 = (secret: string) => Crypto.hash("sha256", secret, "hex")

// Each test speaks from addresses of its own (one trusted proxy hop), so their buckets do not meet.
let nextAddress = 1
const newAddress = () => ({ "x-forwarded-for": `203.0.113.${nextAddress++}` })

/** The node's own counts, from GET /metrics. */
const counts = Effect.gen(function* () {
  const client = yield* TestClient
  const text = (yield* client.request("GET", "/metrics")).text
  const of = (name: string, labels: Record<string, string>) => sample(text, name, labels) ?? 0
  return {
    keyLookups: of("auth_credential_lookups_total", { credential: "api_key" }),
    sessionLookups: of("auth_credential_lookups_total", { credential: "session" }),
    keysFromCache: of("auth_credential_rejections_total", { credential: "api_key", by: "rejected_cache" }),
    sessionsFromCache: of("auth_credential_rejections_total", { credential: "session", by: "rejected_cache" }),
    keysOverLimit: of("auth_credential_rejections_total", { credential: "api_key", by: "address_limit" })
  }
})

const v1Agents = (headers: Record<string, string>) =>
  Effect.flatMap(TestClient, (client) => client.request("GET", "/api/v1/agents", { headers }))
const me = (headers: Record<string, string>) =>
  Effect.flatMap(TestClient, (client) => client.request("GET", "/api/auth/me", { headers }))

layer(TestServer.layer({ trustedProxyHops: 1, credentialFailuresPerAddress: failuresPerAddress }), {
  excludeTestServices: true
})("failed credentials", (it) => {
  it.effect("a wrong key or session token sent again and again is looked up in the database once", () =>
    Effect.gen(function* () {
      // Nothing cached is trusted until the node listens for credential
      // changes, which it starts doing in the background at start.
      const client = yield* TestClient
      yield* TestServer.waitFor(
        "rejections to be remembered",
        Effect.gen(function* () {
          const from = newAddress()
          const key = randomKey()
          yield* v1Agents({ ...from, ...TestServer.bearer(key) })
          const start = (yield* counts).keysFromCache
          yield* v1Agents({ ...from, ...TestServer.bearer(key) })
          return (yield* counts).keysFromCache > start ? true : undefined
        }).pipe(Effect.provideService(TestClient, client))
      )
      const before = yield* counts
      const key = randomKey()
      const token = randomToken()
      // Two addresses, so the repeats stay under the per-address limit.
      for (const [i, from] of [newAddress(), newAddress()].entries()) {
        for (let n = 0; n < 2; n++) {
          const byKey = yield* v1Agents({ ...from, ...TestServer.bearer(key) })
          assert.strictEqual(byKey.status, 401, `key, address ${i}, try ${n}`)
          const byToken = yield* me({ ...from, ...TestServer.bearer(token) })
          assert.strictEqual(byToken.status, 401, `token, address ${i}, try ${n}`)
        }
      }
      const after = yield* counts
      assert.strictEqual(after.keyLookups - before.keyLookups, 1)
      assert.strictEqual(after.keysFromCache - before.keysFromCache, 3)
      assert.strictEqual(after.sessionLookups - before.sessionLookups, 1)
      assert.strictEqual(after.sessionsFromCache - before.sessionsFromCache, 3)
    })
  )

  it.effect(
    "past the limit an address gets 429 with Retry-After before any lookup; its valid credentials still work",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const { key } = yield* TestServer.createKey(account)
        const flooder = newAddress()
        assert.strictEqual((yield* v1Agents({ ...flooder, ...TestServer.bearer(key) })).status, 200)

        for (let n = 0; n < failuresPerAddress; n++) {
          assert.strictEqual(
            (yield* v1Agents({ ...flooder, ...TestServer.bearer(randomKey()) })).status,
            401,
            `try ${n}`
          )
        }
        const before = yield* counts
        const attempts: ReadonlyArray<readonly [string, Record<string, string>]> = [
          ["/api/v1/agents", TestServer.bearer(randomKey())],
          ["/api/public/teams", { "x-api-key": randomKey() }]
        ]
        for (const [path, headers] of attempts) {
          const refused = yield* client.request("GET", path, { headers: { ...flooder, ...headers } })
          assert.strictEqual(refused.status, 429)
          assert.strictEqual(refused.headers.get("content-type"), "application/problem+json")
          assert.strictEqual(refused.body.type, "urn:agent-host:problem:too-many-attempts")
          const retryAfter = Number(refused.headers.get("retry-after"))
          assert.isTrue(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, String(retryAfter))
          assert.strictEqual(refused.body.retryAfter, retryAfter)
        }
        const session = yield* me({ ...flooder, ...TestServer.bearer(randomToken()) })
        assert.strictEqual(session.status, 429)
        assert.isNotNull(session.headers.get("retry-after"))
        // Refused before any lookup.
        const after = yield* counts
        assert.strictEqual(after.keyLookups - before.keyLookups, 0)
        assert.strictEqual(after.sessionLookups - before.sessionLookups, 0)
        assert.strictEqual(after.keysOverLimit - before.keysOverLimit, 2)

        // The address's valid key and session, and a key made now, still work.
        assert.strictEqual((yield* v1Agents({ ...flooder, ...TestServer.bearer(key) })).status, 200)
        assert.strictEqual((yield* me({ ...flooder, ...TestServer.bearer(account.token) })).status, 200)
        assert.strictEqual((yield* me({ ...flooder, cookie: account.cookie })).status, 200)
        const fresh = yield* TestServer.createKey(account)
        assert.strictEqual((yield* v1Agents({ ...flooder, ...TestServer.bearer(fresh.key) })).status, 200)
        // A bad session cookie alone gets the 429 too, not "missing session".
        assert.strictEqual((yield* me({ ...flooder, cookie: `session=${randomToken()}` })).status, 429)
        // Other addresses are not held back.
        assert.strictEqual((yield* v1Agents({ ...newAddress(), ...TestServer.bearer(randomKey()) })).status, 401)
      })
  )

  it.effect("a key or session made right after its credential was refused works at once", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const client = yield* TestClient
      const account = yield* TestServer.signUp()
      const key = randomKey()
      const token = randomToken()
      // Refused, and remembered as refused (a lookup that overlaps news of a
      // new credential, such as the sign-up's own session, is not remembered:
      // hence the retries, each from an address of its own).
      yield* TestServer.waitFor(
        "the refusals to be remembered",
        Effect.gen(function* () {
          const from = newAddress()
          assert.strictEqual((yield* v1Agents({ ...from, ...TestServer.bearer(key) })).status, 401)
          assert.strictEqual((yield* me({ ...from, ...TestServer.bearer(token) })).status, 401)
          const before = yield* counts
          assert.strictEqual((yield* v1Agents({ ...from, ...TestServer.bearer(key) })).status, 401)
          assert.strictEqual((yield* me({ ...from, ...TestServer.bearer(token) })).status, 401)
          const after = yield* counts
          return after.keysFromCache > before.keysFromCache && after.sessionsFromCache > before.sessionsFromCache
            ? true
            : undefined
        }).pipe(Effect.provideService(TestClient, client))
      )

      // Stored as another node would store them (the rejection is cached for
      // 30 s; the wait below is far shorter).
      yield* sql`INSERT INTO api_keys (id, tenant_id, name, prefix, key_hash)
                 VALUES (${newId()}, ${account.tenantId}, 'made elsewhere', ${key.slice(0, 11)}, ${sha256(key)})`
      yield* sql`INSERT INTO sessions (id, tenant_id, user_id, token_hash, expires_at)
                 VALUES (${newId()}, ${account.tenantId}, ${account.userId}, ${sha256(token)}, now() + interval '1 hour')`
      const started = Date.now()
      // Each poll from an address of its own, so refusals before the news arrives add up to no 429.
      const accepted = Effect.suspend(() => {
        const from = newAddress()
        return Effect.all([
          v1Agents({ ...from, ...TestServer.bearer(key) }),
          me({ ...from, ...TestServer.bearer(token) })
        ])
      })
      yield* TestServer.waitFor(
        "the new key and session to be accepted",
        accepted.pipe(
          Effect.map(([byKey, byToken]) => (byKey.status === 200 && byToken.status === 200 ? true : undefined)),
          Effect.provideService(TestClient, client)
        ),
        5_000
      )
      assert.isBelow(Date.now() - started, 5_000)
    })
  )
})
