import { assert, describe, it, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import { newId, TenantId } from "../../src/Domain/Ids.ts"
import { type Owner, Webhooks } from "../../src/Webhooks/Webhooks.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"

// Signing secrets at rest are sealed bound to their owner (tenant, owner kind
// and id), and the format before that (v1) is re-sealed once, then refused.
const key = Crypto.randomBytes(32).toString("base64")
const settings = {
  webhookAllowPrivate: true,
  webhookRetrySchedule: [Duration.millis(100), Duration.millis(200)],
  webhookTimeout: Duration.millis(2_000),
  webhookSecretKey: Option.some(Redacted.make(key))
}

/** A secret sealed as the service sealed them before v2: AES-256-GCM, no additional data, `v1.<iv>.<tag>.<data>`. */
const sealV1 = (secret: string) => {
  const iv = Crypto.randomBytes(12)
  const cipher = Crypto.createCipheriv("aes-256-gcm", Buffer.from(key, "base64"), iv)
  const data = Buffer.concat([cipher.update(secret, "utf8"), cipher.final()])
  return ["v1", iv.toString("base64"), cipher.getAuthTag().toString("base64"), data.toString("base64")].join(".")
}

// Waits allow 20 s: a delivery's two retries, or a server's start and its re-seal pass.
const bound = 20_000

const stored = (ownerId: string) =>
  Effect.flatMap(PgClient.PgClient, (sql) =>
    sql<{ secret: string; previousSecret: string | null }>`
      SELECT secret, previous_secret FROM webhook_endpoints WHERE owner_id = ${ownerId}`.pipe(
      Effect.map((rows) => rows[0]!),
      Effect.orDie
    )
  )

/** Enqueues an event for the owner and starts its delivery; its id. */
const send = (tenantId: TenantId, owner: Owner, type: string) =>
  Effect.gen(function* () {
    const webhooks = yield* Webhooks
    const eventId = yield* webhooks
      .enqueue({ tenantId, owner, subjectId: newId(), type, data: { type } })
      .pipe(Effect.orDie)
    assert.isNotNull(eventId)
    yield* webhooks.deliver(eventId!)
    return eventId!
  })

/** The logged attempts of one event, once there are `n` (or one was answered: a delivery that should have failed). */
const attemptsOf = (tenantId: TenantId, owner: Owner, eventId: string, n: number) =>
  TestServer.waitFor(
    `${n} attempts of ${eventId}`,
    Effect.map(
      Effect.flatMap(Webhooks, (webhooks) => webhooks.deliveries(tenantId, owner, { limit: 100 })),
      (page) => {
        const attempts = page.data.filter((attempt) => attempt.eventId === eventId)
        return attempts.length >= n || attempts.some((attempt) => attempt.httpStatus !== null) ? attempts : undefined
      }
    ).pipe(Effect.orDie),
    bound
  )

const unreadable = /cannot be decrypted.*not stored for this webhook/

layer(TestServer.layer(settings), { excludeTestServices: true })("webhook secrets bound to their owner", (it) => {
  it.effect(
    "a sealed secret copied into another endpoint's row does not open there: its deliveries fail, saying why",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const webhooks = yield* Webhooks
          const sql = yield* PgClient.PgClient
          const first = TenantId.make((yield* TestServer.signUp()).tenantId)
          const second = TenantId.make((yield* TestServer.signUp()).tenantId)
          const source = { kind: "orchestration" as const, id: newId() }
          // Another tenant's team room, and another orchestration of the same tenant.
          const targets = [
            { tenantId: second, owner: { kind: "team" as const, id: newId() }, receiver: yield* FakeReceiver.make },
            {
              tenantId: first,
              owner: { kind: "orchestration" as const, id: newId() },
              receiver: yield* FakeReceiver.make
            }
          ]
          const sourceReceiver = yield* FakeReceiver.make
          const { signingSecret } = yield* webhooks.configure(first, source, { url: sourceReceiver.url() }, [
            "payload",
            "outputWebhookUrl"
          ])
          for (const target of targets) {
            yield* webhooks.configure(target.tenantId, target.owner, { url: target.receiver.url() }, [
              "payload",
              "outputWebhookUrl"
            ])
          }
          const sealed = (yield* stored(source.id)).secret
          assert.match(sealed, /^v2\.[^.]+\.[^.]+\.[^.]+$/)
          for (const target of targets) {
            yield* sql`UPDATE webhook_endpoints SET secret = ${sealed} WHERE owner_id = ${target.owner.id}`
            const eventId = yield* send(target.tenantId, target.owner, "test.moved")
            // Every attempt (the first and both retries) fails the same way, and nothing is sent.
            const attempts = yield* attemptsOf(target.tenantId, target.owner, eventId, 3)
            for (const attempt of attempts) {
              assert.match(attempt.error ?? "", unreadable)
              assert.isNull(attempt.httpStatus)
            }
            assert.strictEqual(target.receiver.requests.length, 0)
          }
          // Where it belongs, the same value still signs.
          const eventId = yield* send(first, source, "test.home")
          const request = yield* TestServer.waitFor(
            "the delivery to the source",
            Effect.sync(() => sourceReceiver.requests[0]),
            bound
          )
          assert.strictEqual(request.headers["webhook-id"], eventId)
          assert.strictEqual(
            (new Webhook(signingSecret!).verify(request.body, request.headers) as any).type,
            "test.home"
          )
        })
      )
  )
})

/** The service on an existing database, for as long as `body` runs, then stopped. */
const withServer = <A, E, R>(databaseUrl: string, body: Effect.Effect<A, E, R>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(
        TestServer.layer({ ...settings, databaseUrl: Option.some(Redacted.make(databaseUrl)) })
      )
      return yield* Effect.provideContext(body, context as any) as Effect.Effect<A, E>
    })
  )

/** `body` with a plain client of the database, as an operator's session would be. */
const withDatabase = <A, E>(databaseUrl: string, body: Effect.Effect<A, E, PgClient.PgClient>) =>
  body.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(databaseUrl) })), Effect.orDie)

describe("webhook secrets of the format before v2", () => {
  it.live(
    "are re-sealed at start and still sign with the same secrets; a v1 value written afterwards never opens",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestServer.TestDatabaseUrl
          const receiver = yield* FakeReceiver.make
          const owner = { kind: "orchestration" as const, id: newId() }

          // A webhook whose secret was rotated (two secrets sign), on a node of this version.
          const setup = yield* withServer(
            databaseUrl,
            Effect.gen(function* () {
              const webhooks = yield* Webhooks
              const tenantId = TenantId.make((yield* TestServer.signUp()).tenantId)
              const made = yield* webhooks.configure(tenantId, owner, { url: receiver.url() }, [
                "payload",
                "outputWebhookUrl"
              ])
              const rotated = yield* webhooks.rotateSecret(tenantId, owner)
              return { tenantId, previous: made.signingSecret!, current: rotated.signingSecret }
            })
          )
          // The database as a version before v2 left it: both secrets in v1, and no record of the upgrade.
          yield* withDatabase(
            databaseUrl,
            Effect.gen(function* () {
              const sql = yield* PgClient.PgClient
              yield* sql`UPDATE webhook_endpoints SET secret = ${sealV1(setup.current)}, previous_secret = ${sealV1(setup.previous)}
                   WHERE owner_id = ${owner.id}`
              yield* sql`DELETE FROM webhook_secret_upgrades`
            })
          )

          yield* withServer(
            databaseUrl,
            Effect.gen(function* () {
              const sql = yield* PgClient.PgClient
              const upgraded = yield* TestServer.waitFor(
                "the re-seal and its record",
                Effect.gen(function* () {
                  const row = yield* stored(owner.id)
                  const done = yield* sql`SELECT 1 FROM webhook_secret_upgrades WHERE version = 'v2'`.pipe(Effect.orDie)
                  return done.length === 1 ? row : undefined
                }),
                bound
              )
              assert.match(upgraded.secret, /^v2\./)
              assert.match(upgraded.previousSecret ?? "", /^v2\./)
              const eventId = yield* send(setup.tenantId, owner, "test.resealed")
              const request = yield* TestServer.waitFor(
                "the delivery",
                Effect.sync(() => receiver.requests[0]),
                bound
              )
              assert.strictEqual(request.headers["webhook-id"], eventId)
              // One signature by each secret, both verified by the receiver with the secret it was given.
              assert.strictEqual(request.headers["webhook-signature"]!.split(" ").length, 2)
              for (const secret of [setup.current, setup.previous]) {
                assert.strictEqual(
                  (new Webhook(secret).verify(request.body, request.headers) as any).type,
                  "test.resealed"
                )
              }

              // No way back: a well-formed v1 value of the right secret, written into the row now, does not open.
              yield* sql`UPDATE webhook_endpoints SET secret = ${sealV1(setup.current)}, previous_secret = NULL WHERE owner_id = ${owner.id}`
              const refused = yield* send(setup.tenantId, owner, "test.downgraded")
              for (const attempt of yield* attemptsOf(setup.tenantId, owner, refused, 3)) {
                assert.match(attempt.error ?? "", unreadable)
              }
              assert.strictEqual(receiver.requests.length, 1)
            })
          )

          // Nor after a restart: the record is durable, so no pass re-seals the v1 value either.
          yield* withServer(
            databaseUrl,
            Effect.gen(function* () {
              const refused = yield* send(setup.tenantId, owner, "test.after-restart")
              for (const attempt of yield* attemptsOf(setup.tenantId, owner, refused, 3)) {
                assert.match(attempt.error ?? "", unreadable)
              }
              assert.match((yield* stored(owner.id)).secret, /^v1\./)
              assert.strictEqual(receiver.requests.length, 1)
            })
          )
        })
      ),
    { timeout: 120_000 }
  )
})
