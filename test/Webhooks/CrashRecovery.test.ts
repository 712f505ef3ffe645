import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import { orchestrationSetup, requestJson } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { spawnService, waitReady } from "../support/Process.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

describe("webhook delivery across a crash", () => {
  it.live(
    "a delivery whose node is killed (kill -9) between attempts goes on after a restart: one event, one success",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestDatabaseUrl
          const receiver = yield* FakeReceiver.make
          receiver.script({ status: 500, body: "not yet" })
          const env = {
            DATABASE_URL: databaseUrl,
            WEBHOOK_ALLOW_PRIVATE: "true",
            // The kill lands in the first wait.
            WEBHOOK_RETRY_SCHEDULE: "4s,500ms",
            WEBHOOK_SECRET_KEY: Crypto.randomBytes(32).toString("base64"),
            SHARD_LOCK_EXPIRATION: "2 seconds",
            ENFORCE_DAILY_LIMITS: "false"
          }
          const first = yield* spawnService(env)
          yield* waitReady(first)
          const setup = yield* Effect.promise(async () => {
            const tenant = await orchestrationSetup(first.baseUrl, "hook-crash@example.com", "local", [
              { id: "s", prompt: "Say {{input}}" }
            ])
            const hooked = await requestJson(`${first.baseUrl}/api/orchestrations/${tenant.orchestrationId}`, {
              method: "PUT",
              headers: tenant.session,
              body: { outputWebhookUrl: receiver.url() }
            })
            await requestJson(`${first.baseUrl}/api/v1/orchestrations/${tenant.orchestrationId}/execute`, {
              method: "POST",
              headers: tenant.bearer,
              body: { input: "hello" }
            })
            return { ...tenant, secret: hooked.signingSecret as string }
          })
          const deliveries = (baseUrl: string) =>
            Effect.promise(() =>
              requestJson(`${baseUrl}/api/orchestrations/${setup.orchestrationId}/deliveries`, {
                headers: setup.session
              })
            )

          // The first attempt is made and logged; then the node dies while waiting for the second.
          yield* eventually(
            Effect.map(deliveries(first.baseUrl), (log) => assert.isAtLeast(log.total, 1, "the first attempt logged")),
            {
              timeoutMs: 20_000
            }
          )
          assert.strictEqual(receiver.requests.length, 1)
          first.child.kill("SIGKILL")
          yield* Effect.promise(() => first.exited)

          const second = yield* spawnService(env)
          yield* waitReady(second)
          const restartedAt = Date.now()
          yield* eventually(
            Effect.sync(() => assert.isAtLeast(receiver.requests.length, 2, "the delivery after the restart")),
            {
              timeoutMs: 60_000
            }
          )
          console.log(`after the restart, the delivery succeeded within ${Date.now() - restartedAt} ms`)
          assert.strictEqual(receiver.requests.length, 2)
          // Nothing more comes: the success ended the delivery. A deliberate quiet window, past the
          // schedule's next wait (500 ms), in which a further attempt would have arrived.
          yield* quietWindow(1_500)
          assert.strictEqual(receiver.requests.length, 2)
          const [before, after] = receiver.requests
          assert.strictEqual(after!.headers["webhook-id"], before!.headers["webhook-id"])
          assert.strictEqual(after!.body, before!.body)
          const event = new Webhook(setup.secret).verify(after!.body, after!.headers) as any
          assert.strictEqual(event.type, "execution.completed")
          const log = yield* deliveries(second.baseUrl)
          assert.strictEqual(log.data[0].httpStatus, 200)
          assert.strictEqual(log.data.at(-1).httpStatus, 500)
          second.child.kill("SIGTERM")
          yield* Effect.promise(() => second.exited)
        })
      ),
    120_000
  )
})
