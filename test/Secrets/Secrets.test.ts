import { assert, describe, it, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Effect, Layer, Option, Redacted, Result } from "effect"
import * as Crypto from "node:crypto"
import { defaultPlanQuotas, settingsConfig } from "../../src/Config.ts"
import { TenantId } from "../../src/Domain/Ids.ts"
import { Secrets } from "../../src/Secrets/Secrets.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOtlp } from "../support/FakeOtlp.ts"
import { spawnService, waitReady } from "../support/Process.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient, type TestResponse } from "../support/TestServer.ts"

// The tenants' secrets vault through its routes on a real server and
// database, and `resolve`, the service the tools use at call time.

const maxSecrets = 3
const settings = {
  planQuotas: { ...defaultPlanQuotas, free: { ...defaultPlanQuotas.free, secrets: maxSecrets } }
}

/** A value no response, log line, trace or stored row may contain. */
const newValue = (tag = "value") => `sk-live-${tag}-${Crypto.randomBytes(12).toString("hex")}`

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const raw = (account: Account, method: string, path: string, body?: unknown) =>
  Effect.flatMap(TestClient, (client) =>
    client.request(method, path, { ...session(account), ...(body === undefined ? {} : { body }) })
  )

const assertBad = (response: TestResponse, field: string, value?: string) => {
  assert.strictEqual(response.status, 400, response.text)
  assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
  assert.deepStrictEqual(
    response.body.errors.map((error: { path: ReadonlyArray<string> }) => error.path),
    [["payload", field]],
    response.text
  )
  if (value !== undefined) assert.notInclude(response.text, value)
}

/** The `Secrets` service over the test server's database, as the tools will call it. */
const resolve = (tenantId: string, names: ReadonlyArray<string>) =>
  Effect.flatMap(Secrets, (secrets) => secrets.resolve(TenantId.make(tenantId), names)).pipe(
    Effect.provide(Layer.orDie(Secrets.layer))
  )

const storedRow = (id: string) =>
  Effect.flatMap(PgClient.PgClient, (sql) =>
    sql<Record<string, unknown>>`SELECT * FROM tenant_secrets WHERE id = ${id}`.pipe(
      Effect.map((rows) => defined(`the row of ${id}`, rows[0])),
      Effect.orDie
    )
  )

layer(TestServer.layer(settings), { excludeTestServices: true })("the secrets vault", (it) => {
  it.effect("creates, lists a page at a time, gets, rotates and deletes; no answer holds a value", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const api = yield* TestServer.apiClient(account.token)
      const values = [newValue("a"), newValue("b"), newValue("c")]

      const [created, createdResponse] = yield* api.secrets.create({
        payload: { name: "STRIPE_KEY", value: Redacted.make(values[0]!) },
        responseMode: "decoded-and-response"
      })
      assert.strictEqual(createdResponse.status, 201)
      assert.deepStrictEqual(Object.keys(JSON.parse(yield* createdResponse.text)).sort(), [
        "createdAt",
        "id",
        "lastFour",
        "name",
        "rotatedAt"
      ])
      assert.strictEqual(created.name, "STRIPE_KEY")
      assert.strictEqual(created.lastFour, values[0]!.slice(-4))
      assert.isNull(created.rotatedAt)
      const others = [
        yield* api.secrets.create({ payload: { name: "_github_token", value: Redacted.make(values[1]!) } }),
        yield* api.secrets.create({ payload: { name: "Z9", value: Redacted.make(values[2]!) } })
      ]
      const ids = [created.id, ...others.map((secret) => secret.id)]

      const [first, firstResponse] = yield* api.secrets.list({
        query: { limit: 2 },
        responseMode: "decoded-and-response"
      })
      assert.strictEqual(first.total, 3)
      assert.deepStrictEqual(
        first.data.map((secret) => secret.id),
        ids.slice(0, 2)
      )
      assert.isNotNull(first.nextCursor)
      const second = yield* api.secrets.list({ query: { limit: 2, cursor: first.nextCursor! } })
      assert.deepStrictEqual(
        second.data.map((secret) => secret.id),
        ids.slice(2)
      )
      assert.isNull(second.nextCursor)

      const [got, gotResponse] = yield* api.secrets.get({
        params: { id: created.id },
        responseMode: "decoded-and-response"
      })
      assert.deepStrictEqual(got, created)

      const rotatedValue = newValue("rotated")
      const [rotated, rotatedResponse] = yield* api.secrets.update({
        params: { id: created.id },
        payload: { value: Redacted.make(rotatedValue) },
        responseMode: "decoded-and-response"
      })
      assert.strictEqual(rotatedResponse.status, 200)
      assert.strictEqual(rotated.lastFour, rotatedValue.slice(-4))
      assert.strictEqual(rotated.name, "STRIPE_KEY")
      assert.deepStrictEqual(rotated.createdAt, created.createdAt)
      assert.isNotNull(rotated.rotatedAt)
      const resolved = yield* resolve(account.tenantId, ["STRIPE_KEY", "_github_token"])
      assert.strictEqual(Redacted.value(resolved.get("STRIPE_KEY")!), rotatedValue)
      assert.strictEqual(Redacted.value(resolved.get("_github_token")!), values[1])

      const answers = [createdResponse, firstResponse, gotResponse, rotatedResponse]
      for (const response of answers) {
        const text = yield* response.text
        for (const value of [...values, rotatedValue]) assert.notInclude(text, value)
      }
      // Raw reads too: the bytes as sent.
      for (const path of ["/api/secrets", `/api/secrets/${created.id}`]) {
        const response = yield* raw(account, "GET", path)
        assert.strictEqual(response.status, 200)
        for (const value of [...values, rotatedValue]) assert.notInclude(response.text, value)
      }

      yield* api.secrets.remove({ params: { id: created.id } })
      const gone = yield* Effect.flip(api.secrets.get({ params: { id: created.id } }))
      assert.strictEqual(gone._tag, "NotFound")
      assert.strictEqual((yield* api.secrets.list({ query: {} })).total, 2)
      const missing = yield* Effect.flip(resolve(account.tenantId, ["STRIPE_KEY"]))
      assert.deepStrictEqual(missing.missing, ["STRIPE_KEY"])
    })
  )

  it.effect("shows no last four characters of a value shorter than 12, and counts them by character", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const api = yield* TestServer.apiClient(account.token)
      const short = yield* api.secrets.create({ payload: { name: "PIN", value: Redacted.make("12345678901") } })
      assert.strictEqual(short.lastFour, "")
      const emoji = yield* api.secrets.create({
        payload: { name: "EMOJI", value: Redacted.make("abcdefghij🦦🦦🦦🦦") }
      })
      assert.strictEqual(emoji.lastFour, "🦦🦦🦦🦦")
    })
  )

  it.effect("a second secret of the same name in the tenant is a 409 naming it; another tenant may use the name", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const other = yield* TestServer.signUp()
      const first = yield* raw(account, "POST", "/api/secrets", { name: "API_TOKEN", value: newValue() })
      assert.strictEqual(first.status, 201, first.text)
      const value = newValue("duplicate")
      const again = yield* raw(account, "POST", "/api/secrets", { name: "API_TOKEN", value })
      assert.strictEqual(again.status, 409, again.text)
      assert.strictEqual(again.headers.get("content-type"), "application/problem+json")
      assert.strictEqual(again.body.type, "urn:agent-host:problem:conflict")
      assert.include(again.body.detail, "API_TOKEN")
      assert.notInclude(again.text, value)
      assert.strictEqual((yield* raw(account, "GET", "/api/secrets")).body.total, 1)
      const theirs = yield* raw(other, "POST", "/api/secrets", { name: "API_TOKEN", value: newValue() })
      assert.strictEqual(theirs.status, 201, theirs.text)
    })
  )

  it.effect("bad names and values are 400s naming the field, and never quote the value", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      for (const name of ["", "1ABC", "has-dash", "has space", "é", "a".repeat(65), "A\u0000", 7, null]) {
        assertBad(yield* raw(account, "POST", "/api/secrets", { name, value: newValue() }), "name")
      }
      assert.strictEqual(
        (yield* raw(account, "POST", "/api/secrets", { name: "a".repeat(64), value: "x" })).status,
        201
      )
      const long = `${newValue("long")}${"x".repeat(8192)}`
      const withNul = `${newValue("nul")}\u0000tail`
      const lone = `${newValue("surrogate")}\ud800`
      for (const value of [long, withNul, lone]) {
        assertBad(yield* raw(account, "POST", "/api/secrets", { name: "GOOD", value }), "value", value.slice(0, 40))
      }
      assertBad(yield* raw(account, "POST", "/api/secrets", { name: "GOOD", value: "" }), "value")
      assertBad(yield* raw(account, "POST", "/api/secrets", { name: "GOOD", value: 42 }), "value")
      assertBad(yield* raw(account, "POST", "/api/secrets", { name: "GOOD" }), "value")
      assert.strictEqual(
        (yield* raw(account, "POST", "/api/secrets", { name: "LONGEST", value: "y".repeat(8192) })).status,
        201
      )

      const made = yield* raw(account, "POST", "/api/secrets", { name: "GOOD", value: newValue() })
      assert.strictEqual(made.status, 201, made.text)
      for (const value of [long, withNul]) {
        assertBad(yield* raw(account, "PUT", `/api/secrets/${made.body.id}`, { value }), "value", value.slice(0, 40))
      }
      assertBad(yield* raw(account, "PUT", `/api/secrets/${made.body.id}`, { value: "" }), "value")
      assertBad(yield* raw(account, "PUT", `/api/secrets/${made.body.id}`, {}), "value")
      const badId = yield* raw(account, "GET", "/api/secrets/%00")
      assert.strictEqual(badId.status, 400, badId.text)
      assert.deepStrictEqual(badId.body.errors[0].path, ["params", "id"])
      assert.strictEqual((yield* raw(account, "GET", "/api/secrets/not-an-id")).status, 404)
    })
  )

  it.effect("another tenant's secret is a 404 on every route, and `resolve` never sees it", () =>
    Effect.gen(function* () {
      const owner = yield* TestServer.signUp()
      const stranger = yield* TestServer.signUp()
      const value = newValue("owned")
      const made = yield* raw(owner, "POST", "/api/secrets", { name: "OWNED", value })
      assert.strictEqual(made.status, 201, made.text)
      const path = `/api/secrets/${made.body.id}`
      for (const [method, body] of [
        ["GET", undefined],
        ["PUT", { value: newValue("stranger") }],
        ["DELETE", undefined]
      ] as const) {
        const response = yield* raw(stranger, method, path, body)
        assert.strictEqual(response.status, 404, `${method}: ${response.text}`)
        assert.strictEqual(response.body.type, "urn:agent-host:problem:not-found")
      }
      assert.strictEqual((yield* raw(stranger, "GET", "/api/secrets")).body.total, 0)
      const notTheirs = yield* Effect.flip(resolve(stranger.tenantId, ["OWNED"]))
      assert.deepStrictEqual(notTheirs.missing, ["OWNED"])
      // Untouched by the stranger's attempts.
      const resolved = yield* resolve(owner.tenantId, ["OWNED"])
      assert.strictEqual(Redacted.value(resolved.get("OWNED")!), value)
      assert.isNull((yield* raw(owner, "GET", path)).body.rotatedAt)
    })
  )

  it.effect("the plan's MAX_SECRETS are stored, the next is a 429 naming the quota; a deletion frees a place", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const ids: Array<string> = []
      for (let i = 0; i < maxSecrets; i++) {
        const made = yield* raw(account, "POST", "/api/secrets", { name: `S${i}`, value: newValue() })
        assert.strictEqual(made.status, 201, made.text)
        ids.push(made.body.id)
      }
      const refused = yield* raw(account, "POST", "/api/secrets", { name: "ONE_MORE", value: newValue() })
      assert.strictEqual(refused.status, 429, refused.text)
      assert.strictEqual(refused.body.type, "urn:agent-host:problem:quota-reached")
      assert.deepInclude(refused.body, {
        quota: "secrets",
        setting: "FREE_MAX_SECRETS",
        plan: "free",
        limit: maxSecrets,
        used: maxSecrets,
        requested: 1
      })
      assert.strictEqual((yield* raw(account, "DELETE", `/api/secrets/${ids[0]}`)).status, 204)
      assert.strictEqual(
        (yield* raw(account, "POST", "/api/secrets", { name: "ONE_MORE", value: newValue() })).status,
        201
      )
    })
  )

  it.effect("the stored row holds the value sealed, never in plain text", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const value = newValue("stored")
      const made = yield* raw(account, "POST", "/api/secrets", { name: "STORED", value })
      const row = yield* storedRow(made.body.id)
      const text = JSON.stringify(row)
      for (const form of [value, Buffer.from(value).toString("base64"), Buffer.from(value).toString("hex")]) {
        assert.notInclude(text, form)
      }
      assert.match(String(row.sealedValue), /^s1\.[^.]+\.[^.]+\.[^.]+$/)
      assert.strictEqual(row.keyVersion, 1)
      assert.strictEqual(row.lastFour, value.slice(-4))
    })
  )

  it.effect("resolve: every name once, a value of each; names the tenant lacks are reported together", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const a = newValue("a")
      const b = newValue("b")
      yield* raw(account, "POST", "/api/secrets", { name: "A", value: a })
      yield* raw(account, "POST", "/api/secrets", { name: "B", value: b })
      const resolved = yield* resolve(account.tenantId, ["A", "B", "A"])
      assert.deepStrictEqual([...resolved.keys()].sort(), ["A", "B"])
      assert.strictEqual(Redacted.value(resolved.get("A")!), a)
      assert.strictEqual(Redacted.value(resolved.get("B")!), b)
      // What prints a resolved value shows no value.
      assert.notInclude(String(resolved.get("A")), a)
      assert.notInclude(JSON.stringify([...resolved]), a)
      assert.strictEqual((yield* resolve(account.tenantId, [])).size, 0)

      const failed = yield* Effect.flip(resolve(account.tenantId, ["A", "NOPE", "ALSO_NOPE"]))
      assert.strictEqual(failed._tag, "SecretsUnavailable")
      assert.deepStrictEqual(failed.missing, ["NOPE", "ALSO_NOPE"])
      assert.deepStrictEqual(failed.unreadable, [])
      assert.include(failed.message, "NOPE")
      assert.notInclude(failed.message, a)
    })
  )

  it.effect("a sealed value copied into another row does not open there, in the tenant or another", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const other = yield* TestServer.signUp()
      const value = newValue("copied")
      const source = yield* raw(account, "POST", "/api/secrets", { name: "SOURCE", value })
      yield* raw(account, "POST", "/api/secrets", { name: "TARGET", value: newValue() })
      yield* raw(other, "POST", "/api/secrets", { name: "SOURCE", value: newValue() })
      const sql = yield* PgClient.PgClient
      yield* sql`UPDATE tenant_secrets t SET sealed_value = s.sealed_value, key_version = s.key_version
                 FROM tenant_secrets s
                 WHERE s.id = ${source.body.id} AND t.id <> s.id
                   AND (t.tenant_id = ${other.tenantId} OR t.name = 'TARGET')`.pipe(Effect.orDie)
      const here = yield* Effect.flip(resolve(account.tenantId, ["TARGET"]))
      assert.deepStrictEqual(here.unreadable, ["TARGET"])
      assert.deepStrictEqual(here.missing, [])
      const there = yield* Effect.flip(resolve(other.tenantId, ["SOURCE"]))
      assert.deepStrictEqual(there.unreadable, ["SOURCE"])
      // The source itself still opens.
      assert.strictEqual(Redacted.value((yield* resolve(account.tenantId, ["SOURCE"])).get("SOURCE")!), value)
    })
  )
})

/** The service on an existing database with `overrides`, for as long as `body` runs, then stopped. */
const withServer = <A, E, R>(
  databaseUrl: string,
  overrides: Parameters<typeof TestServer.layer>[0],
  body: Effect.Effect<A, E, R>
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(
        TestServer.layer({ ...overrides, databaseUrl: Option.some(Redacted.make(databaseUrl)) })
      )
      return yield* Effect.provideContext(body, context as any) as Effect.Effect<A, E>
    })
  )

const keyOf = () => Redacted.make(Crypto.randomBytes(32).toString("base64"))

describe("key rotation", () => {
  it.live(
    "a value sealed under version 1 opens with SECRETS_KEY_VERSION 2 and the old key in SECRETS_PREVIOUS_KEYS, and is re-sealed under the new key",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestServer.TestDatabaseUrl
          const first = keyOf()
          const second = keyOf()
          const value = newValue("rotation")

          const made = yield* withServer(
            databaseUrl,
            { secretsKey: Option.some(first) },
            Effect.gen(function* () {
              const account = yield* TestServer.signUp()
              const response = yield* raw(account, "POST", "/api/secrets", { name: "ROTATED", value })
              assert.strictEqual(response.status, 201, response.text)
              return {
                tenantId: account.tenantId,
                id: response.body.id as string,
                row: yield* storedRow(response.body.id)
              }
            })
          )
          assert.strictEqual(made.row.keyVersion, 1)

          // The new key without the old one: the value is there, and unreadable.
          yield* withServer(
            databaseUrl,
            { secretsKey: Option.some(second), secretsKeyVersion: 2 },
            Effect.gen(function* () {
              const failed = yield* Effect.flip(resolve(made.tenantId, ["ROTATED"]))
              assert.deepStrictEqual(failed.unreadable, ["ROTATED"])
              assert.strictEqual((yield* storedRow(made.id)).keyVersion, 1)
            })
          )

          // With the old key as version 1: it opens, and the pass at start re-seals it under version 2.
          yield* withServer(
            databaseUrl,
            {
              secretsKey: Option.some(second),
              secretsKeyVersion: 2,
              secretsPreviousKeys: [{ version: 1, key: first }]
            },
            Effect.gen(function* () {
              const resolved = yield* resolve(made.tenantId, ["ROTATED"])
              assert.strictEqual(Redacted.value(resolved.get("ROTATED")!), value)
              const row = yield* eventually(
                Effect.map(storedRow(made.id), (row) => {
                  assert.strictEqual(row.keyVersion, 2)
                  return row
                })
              )
              assert.notStrictEqual(row.sealedValue, made.row.sealedValue)
              assert.strictEqual(row.lastFour, made.row.lastFour)
              assert.notInclude(JSON.stringify(row), value)
            })
          )

          // The old key is no longer needed.
          yield* withServer(
            databaseUrl,
            { secretsKey: Option.some(second), secretsKeyVersion: 2 },
            Effect.gen(function* () {
              const resolved = yield* resolve(made.tenantId, ["ROTATED"])
              assert.strictEqual(Redacted.value(resolved.get("ROTATED")!), value)
            })
          )
        })
      ),
    60_000
  )

  it.live(
    "without SECRETS_KEY the webhook key seals; it then moves to a key of its own as version 1",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestServer.TestDatabaseUrl
          const webhookKey = keyOf()
          const own = keyOf()
          const value = newValue("fallback")
          const made = yield* withServer(
            databaseUrl,
            { webhookSecretKey: Option.some(webhookKey), secretsKey: Option.none() },
            Effect.gen(function* () {
              const account = yield* TestServer.signUp()
              const response = yield* raw(account, "POST", "/api/secrets", { name: "FALLBACK", value })
              assert.strictEqual(response.status, 201, response.text)
              return { tenantId: account.tenantId, id: response.body.id as string }
            })
          )
          yield* withServer(
            databaseUrl,
            {
              webhookSecretKey: Option.some(webhookKey),
              secretsKey: Option.some(own),
              secretsKeyVersion: 2,
              secretsPreviousKeys: [{ version: 1, key: webhookKey }]
            },
            Effect.gen(function* () {
              yield* eventually(Effect.map(storedRow(made.id), (row) => assert.strictEqual(row.keyVersion, 2)))
            })
          )
          // Another webhook key does not matter any more.
          yield* withServer(
            databaseUrl,
            { webhookSecretKey: Option.some(keyOf()), secretsKey: Option.some(own), secretsKeyVersion: 2 },
            Effect.gen(function* () {
              const resolved = yield* resolve(made.tenantId, ["FALLBACK"])
              assert.strictEqual(Redacted.value(resolved.get("FALLBACK")!), value)
            })
          )
        })
      ),
    60_000
  )
})

describe("settings", () => {
  const parse = (env: Record<string, string>) =>
    Effect.runSync(Effect.result(settingsConfig.parse(ConfigProvider.fromEnv({ env }))))

  it("SECRETS_PREVIOUS_KEYS: version:key entries; a bad one stops the start without showing a key", () => {
    const key = Crypto.randomBytes(32).toString("base64")
    const read = parse({ SECRETS_KEY_VERSION: "3", SECRETS_PREVIOUS_KEYS: `1:${key}, 2:${key},` })
    assert.isTrue(Result.isSuccess(read))
    if (Result.isSuccess(read)) {
      assert.strictEqual(read.success.secretsKeyVersion, 3)
      assert.deepStrictEqual(
        read.success.secretsPreviousKeys.map((previous) => [previous.version, Redacted.value(previous.key)]),
        [
          [1, key],
          [2, key]
        ]
      )
    }
    for (const [env, message] of [
      [{ SECRETS_PREVIOUS_KEYS: `1:${key},2:c2hvcnQ=` }, /entry 2 is not one/],
      [{ SECRETS_PREVIOUS_KEYS: `${key}` }, /entry 1 is not one/],
      [{ SECRETS_KEY_VERSION: "5", SECRETS_PREVIOUS_KEYS: `2:${key},2:${key}` }, /2 is given twice/],
      [{ SECRETS_KEY_VERSION: "2", SECRETS_PREVIOUS_KEYS: `2:${key}` }, /version 2, which is SECRETS_KEY_VERSION/],
      [{ SECRETS_KEY_VERSION: "0" }, /SECRETS_KEY_VERSION/]
    ] as const) {
      const refused = parse(env)
      assert.isTrue(Result.isFailure(refused), JSON.stringify(Object.keys(env)))
      if (Result.isFailure(refused)) {
        assert.match(String(refused.failure), message)
        assert.notInclude(String(refused.failure), key)
      }
    }
  })
})

describe("the service's output", () => {
  it.live(
    "no log line and no span attribute of a running service holds a value, whatever the route answered",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const otlp = yield* FakeOtlp.make
          const service = yield* spawnService({
            DATABASE_URL: yield* TestServer.TestDatabaseUrl,
            WEBHOOK_SECRET_KEY: Crypto.randomBytes(32).toString("base64"),
            SECRETS_KEY: Crypto.randomBytes(32).toString("base64"),
            LOG_LEVEL: "all",
            OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
            DASHBOARD_ENABLED: "false"
          })
          yield* waitReady(service)
          const values = [newValue("first"), newValue("rotated"), newValue("duplicate"), newValue("foreign")]
          const bodies = yield* Effect.promise(async () => {
            const call = async (method: string, path: string, token: string | undefined, body?: unknown) => {
              const response = await fetch(service.baseUrl + path, {
                method,
                headers: {
                  ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
                  ...(body === undefined ? {} : { "content-type": "application/json" })
                },
                body: body === undefined ? null : JSON.stringify(body)
              })
              return { status: response.status, text: await response.text() }
            }
            const account = async (email: string) => {
              const password = "correct horse battery staple"
              await call("POST", "/api/auth/register", undefined, { email, password, name: "Vault" })
              return JSON.parse((await call("POST", "/api/auth/login", undefined, { email, password })).text)
                .token as string
            }
            const token = await account("vault-log@example.com")
            const stranger = await account("vault-log-other@example.com")
            const made = await call("POST", "/api/secrets", token, { name: "LOGGED", value: values[0] })
            assert.strictEqual(made.status, 201, made.text)
            const id = JSON.parse(made.text).id as string
            const answers = [
              made,
              await call("PUT", `/api/secrets/${id}`, token, { value: values[1] }),
              await call("POST", "/api/secrets", token, { name: "LOGGED", value: values[2] }),
              await call("PUT", `/api/secrets/${id}`, stranger, { value: values[3] }),
              await call("POST", "/api/secrets", token, { name: "x-bad", value: values[0] }),
              await call("POST", "/api/secrets", token, { name: "LONG", value: `${values[0]}${"z".repeat(9000)}` }),
              await call("GET", "/api/secrets", token),
              await call("GET", `/api/secrets/${id}`, token),
              await call("DELETE", `/api/secrets/${id}`, token)
            ]
            assert.deepStrictEqual(
              answers.map((answer) => answer.status),
              [201, 200, 409, 404, 400, 400, 200, 200, 204]
            )
            return answers.map((answer) => answer.text)
          })
          // Every span of the requests above has reached the collector.
          yield* Effect.promise(() =>
            eventually(
              () => {
                const names = new Set(otlp.spans().map((span) => span.name))
                for (const name of ["Secrets.create", "Secrets.rotate", "Secrets.remove"]) {
                  assert.isTrue(names.has(name), `no ${name} span yet`)
                }
              },
              { timeoutMs: 30_000 }
            )
          )
          const spans = JSON.stringify(otlp.spans())
          const output = service.stdout() + service.stderr()
          assert.include(output, "/api/secrets", "the access log is captured")
          for (const value of values) {
            for (const text of [...bodies, spans, output]) assert.notInclude(text, value.slice(0, 24))
          }
        })
      ),
    90_000
  )
})
