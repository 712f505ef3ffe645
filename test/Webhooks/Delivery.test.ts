import { assert, describe, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import { newId, TenantId } from "../../src/Domain/Ids.ts"
import { DeliveryWorkflow } from "../../src/Webhooks/Delivery.ts"
import { Webhooks } from "../../src/Webhooks/Webhooks.ts"
import { defined, eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import * as TestServer from "../support/TestServer.ts"

// The service's delivery machinery on its own, through the Webhooks service
// the features call: outbox in the caller's transaction, signing, retries.
const settings = {
  webhookAllowPrivate: true,
  webhookRetrySchedule: [Duration.millis(100), Duration.millis(200), Duration.millis(300)],
  webhookTimeout: Duration.millis(500),
  webhookSecretKey: Option.some(Redacted.make(Crypto.randomBytes(32).toString("base64"))),
  webhookMessagesRetention: Duration.zero
}

layer(TestServer.layer(settings), { excludeTestServices: true })("webhook delivery", (it) => {
  describe("the outbox and the delivery workflow", () => {
    it.effect(
      "an event enqueued in a transaction is delivered, signed, after failures, with every attempt logged",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const webhooks = yield* Webhooks
            const sql = yield* PgClient.PgClient
            const receiver = yield* FakeReceiver.make
            const account = yield* TestServer.signUp()
            const tenantId = TenantId.make(account.tenantId)
            const owner = { kind: "orchestration" as const, id: newId() }
            const configured = yield* webhooks.configure(tenantId, owner, { url: receiver.url() }, [
              "payload",
              "outputWebhookUrl"
            ])
            assert.match(configured.signingSecret ?? "", /^whsec_/)
            assert.deepStrictEqual(configured.state, {
              outputWebhookUrl: receiver.url(),
              webhookEnabled: true,
              webhookDisabledReason: null
            })
            receiver.script({ status: 500, times: 2, body: "down" })
            const eventId = yield* webhooks
              .enqueue({ tenantId, owner, subjectId: "run-1", type: "test.done", data: { n: 1 } })
              .pipe(sql.withTransaction)
            assert.isNotNull(eventId)
            yield* webhooks.deliver(eventId!)
            yield* eventually(Effect.sync(() => assert.isAtLeast(receiver.requests.length, 3)))
            const verifier = new Webhook(configured.signingSecret!)
            for (const request of receiver.requests) {
              assert.strictEqual(request.headers["webhook-id"], eventId)
              const payload = verifier.verify(request.body, request.headers) as any
              assert.strictEqual(payload.type, "test.done")
              assert.deepStrictEqual(payload.data, { n: 1 })
            }
            assert.strictEqual(new Set(receiver.requests.map((request) => request.body)).size, 1)
            // `{ type, timestamp, data }`, the timestamp when the event was made.
            const body = JSON.parse(receiver.requests[0]!.body)
            assert.deepStrictEqual(Object.keys(body), ["type", "timestamp", "data"])
            assert.strictEqual(new Date(body.timestamp).toISOString(), body.timestamp)
            assert.isBelow(Math.abs(Date.parse(body.timestamp) - Date.now()), 10_000)
            const log = yield* eventually(
              Effect.map(webhooks.deliveries(tenantId, owner, {}), (page) => {
                assert.isAtLeast(page.total, 3, "every attempt logged")
                return page
              })
            )
            assert.deepStrictEqual(
              log.data.map((attempt) => [attempt.attempt, attempt.httpStatus]),
              [
                [3, 200],
                [2, 500],
                [1, 500]
              ]
            )
            // The receiver is on loopback, a private target: its answer is not kept (Guard.test.ts has the rule).
            assert.strictEqual(log.data[2]!.response, null)
          })
        )
    )

    it.effect("the event is part of the caller's transaction: rolled back with it, never written alone", () =>
      Effect.gen(function* () {
        const webhooks = yield* Webhooks
        const sql = yield* PgClient.PgClient
        const account = yield* TestServer.signUp()
        const tenantId = TenantId.make(account.tenantId)
        const owner = { kind: "team" as const, id: newId() }
        yield* webhooks.configure(tenantId, owner, { url: "http://127.0.0.1:9/hook" }, [
          "payload",
          "room",
          "outputWebhookUrl"
        ])
        const subjectId = newId()
        const failed = yield* webhooks
          .enqueue({ tenantId, owner, subjectId, type: "team.run.completed", data: {} })
          .pipe(Effect.andThen(Effect.fail("the caller's own failure")), sql.withTransaction, Effect.flip)
        assert.strictEqual(failed, "the caller's own failure")
        const rows = yield* sql`SELECT id FROM webhook_events WHERE subject_id = ${subjectId}`
        assert.strictEqual(rows.length, 0)
        // Nothing is written for an owner without an enabled webhook.
        yield* webhooks.configure(tenantId, owner, { enabled: false }, ["payload", "room", "webhookEnabled"])
        const none = yield* webhooks.enqueue({ tenantId, owner, subjectId, type: "team.run.completed", data: {} })
        assert.isNull(none)
        const states = yield* webhooks.states(tenantId, "team", [owner.id, newId()])
        assert.deepStrictEqual(
          [...states.values()].map((state) => state.webhookEnabled),
          [false, false]
        )
        assert.strictEqual([...states.values()][0]!.outputWebhookUrl, "http://127.0.0.1:9/hook")
      })
    )

    it.effect(
      "an event committed but never handed to the cluster (a crash right after the commit) is delivered by the sweep",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const webhooks = yield* Webhooks
            const sql = yield* PgClient.PgClient
            const receiver = yield* FakeReceiver.make
            const account = yield* TestServer.signUp()
            const tenantId = TenantId.make(account.tenantId)
            const owner = { kind: "orchestration" as const, id: newId() }
            const { signingSecret } = yield* webhooks.configure(tenantId, owner, { url: receiver.url() }, [
              "payload",
              "outputWebhookUrl"
            ])
            const eventId = yield* webhooks
              .enqueue({ tenantId, owner, subjectId: "lost", type: "test.lost", data: { lost: true } })
              .pipe(sql.withTransaction)
            // No deliver: the sweep finds it within a few seconds.
            const request = yield* eventually(
              Effect.sync(() => defined("the sweep's delivery", receiver.requests[0])),
              { timeoutMs: 20_000 }
            )
            assert.strictEqual(request.headers["webhook-id"], eventId)
            assert.deepStrictEqual((new Webhook(signingSecret!).verify(request.body, request.headers) as any).data, {
              lost: true
            })
            // A deliberate quiet window over the sweep's next pass (every 3 s): it does not start the event again.
            yield* quietWindow(3_500)
            assert.strictEqual(receiver.requests.length, 1)
          })
        )
    )

    it.effect("a secret that cannot be decrypted (the key changed) is a recorded failure, not a crash", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const webhooks = yield* Webhooks
          const sql = yield* PgClient.PgClient
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          const tenantId = TenantId.make(account.tenantId)
          const owner = { kind: "orchestration" as const, id: newId() }
          yield* webhooks.configure(tenantId, owner, { url: receiver.url() }, ["payload", "outputWebhookUrl"])
          // What another key sealed: this key cannot open it.
          const stored = yield* sql<{
            secret: string
          }>`SELECT secret FROM webhook_endpoints WHERE owner_id = ${owner.id}`
          assert.notInclude(stored[0]!.secret, "whsec_")
          const [version, iv, tag, data] = stored[0]!.secret.split(".")
          const tampered = [
            version,
            iv,
            tag,
            Buffer.from(Buffer.from(data!, "base64").map((byte) => byte ^ 1)).toString("base64")
          ]
          yield* sql`UPDATE webhook_endpoints SET secret = ${tampered.join(".")} WHERE owner_id = ${owner.id}`
          const eventId = yield* webhooks.enqueue({ tenantId, owner, subjectId: "s", type: "test.key", data: {} })
          yield* webhooks.deliver(eventId!)
          const log = yield* eventually(
            Effect.map(webhooks.deliveries(tenantId, owner, {}), (page) => {
              assert.isAtLeast(page.total, 4, "every attempt logged")
              return page
            })
          )
          for (const attempt of log.data) assert.match(attempt.error ?? "", /cannot be decrypted.*WEBHOOK_SECRET_KEY/)
          assert.strictEqual(receiver.requests.length, 0)
          // A rotation makes a secret the key can open again.
          yield* webhooks.rotateSecret(tenantId, owner)
          yield* webhooks.redeliver(tenantId, owner, eventId!)
          yield* eventually(Effect.sync(() => defined("the delivery after rotating", receiver.requests[0])))
        })
      )
    )

    it.effect("the cluster's stored messages of a finished delivery are pruned; the log stays", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const webhooks = yield* Webhooks
          const sql = yield* PgClient.PgClient
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          const tenantId = TenantId.make(account.tenantId)
          const owner = { kind: "orchestration" as const, id: newId() }
          yield* webhooks.configure(tenantId, owner, { url: receiver.url() }, ["payload", "outputWebhookUrl"])
          const eventId = (yield* webhooks.enqueue({ tenantId, owner, subjectId: "p", type: "test.prune", data: {} }))!
          yield* webhooks.deliver(eventId)
          yield* eventually(Effect.sync(() => defined("the delivery", receiver.requests[0])))
          const entityId = yield* DeliveryWorkflow.executionId({ eventId, redelivery: 0 })
          const stored = () =>
            sql<{ n: number }>`SELECT count(*)::int AS n FROM cluster_messages
            WHERE entity_type = 'Workflow/WebhookDelivery' AND entity_id = ${entityId}`.pipe(
              Effect.map((rows) => rows[0]!.n),
              Effect.orDie
            )
          assert.isAbove(yield* stored(), 0)
          yield* eventually(
            Effect.map(stored(), (n) => assert.strictEqual(n, 0)),
            { timeoutMs: 25_000, intervalMs: 200 }
          )
          const log = yield* webhooks.deliveries(tenantId, owner, {})
          assert.strictEqual(log.total, 1)
        })
      )
    )
  })
})
