import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import type { AppSettings } from "../../src/Config.ts"
import { AgentId, newId, TenantId } from "../../src/Domain/Ids.ts"
import { ExecutionsRepo } from "../../src/Orchestrations/ExecutionsRepo.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// Executions' webhook events through the real service: an orchestration with
// an outputWebhookUrl, executions run by the cluster, a receiver on loopback
// (hence WEBHOOK_ALLOW_PRIVATE), signatures checked with the official
// `standardwebhooks` package.

const schedule = [150, 200, 250, 300]
const settings: Partial<AppSettings> = {
  webhookAllowPrivate: true,
  webhookRetrySchedule: schedule.map((ms) => Duration.millis(ms)),
  webhookTimeout: Duration.millis(400),
  webhookSecretKey: Option.some(Redacted.make(Crypto.randomBytes(32).toString("base64")))
}

const setUp = (options: { readonly model: string; readonly url: string | undefined }) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const key = yield* TestServer.createKey(account, ["execute", "read"])
    const agent = yield* TestServer.createAgent(account, { model: options.model })
    const session = TestServer.bearer(account.token)
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: session,
      body: {
        name: "Hooked",
        steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }],
        ...(options.url === undefined ? {} : { outputWebhookUrl: options.url })
      }
    })
    assert.strictEqual(created.status, 201, created.text)
    const id = created.body.id as string
    const auth = TestServer.bearer(key.key)
    const execute = (input = "hello") =>
      Effect.gen(function* () {
        const started = yield* client.request("POST", `/api/v1/orchestrations/${id}/execute`, {
          headers: auth,
          body: { input }
        })
        assert.strictEqual(started.status, 202, started.text)
        return started.body.executionId as string
      })
    const execution = (executionId: string) =>
      Effect.map(
        client.request("GET", `/api/v1/executions/${executionId}`, { headers: auth }),
        (response) => response.body
      )
    const deliveries = (query = "") =>
      Effect.map(
        client.request("GET", `/api/orchestrations/${id}/deliveries${query}`, { headers: session }),
        (response) => response
      )
    const orchestration = () =>
      Effect.map(client.request("GET", `/api/orchestrations/${id}`, { headers: session }), (response) => response.body)
    return {
      account,
      session,
      auth,
      agentId: agent.id,
      id,
      created: created.body,
      execute,
      execution,
      deliveries,
      orchestration
    }
  })

const verify = (secret: string, request: FakeReceiver.ReceivedRequest) =>
  new Webhook(secret).verify(request.body, request.headers) as { type: string; timestamp: string; data: any }

layer(TestServer.layerWithFakeOpenAi(openaiKey, settings), { excludeTestServices: true })(
  "execution webhooks",
  (it) => {
    describe("final states", () => {
      it.effect(
        "completed, failed and cancelled executions each deliver one signed event whose data is the execution",
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const client = yield* TestClient
              const fake = yield* FakeOpenAi
              fake.reset()
              const receiver = yield* FakeReceiver.make
              const flow = yield* setUp({ model: "openai/gpt-4o-mini", url: receiver.url() })
              const secret = flow.created.signingSecret as string
              assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/)
              assert.strictEqual(flow.created.outputWebhookUrl, receiver.url())
              assert.isTrue(flow.created.webhookEnabled)

              const finished = (executionId: string) =>
                eventually(
                  Effect.sync(() =>
                    defined(
                      "the execution's event",
                      receiver.requests.find((request) => JSON.parse(request.body).data.id === executionId)
                    )
                  )
                )

              // Completed.
              const completedId = yield* flow.execute()
              const completed = yield* finished(completedId)
              const completedEvent = verify(secret, completed)
              assert.strictEqual(completedEvent.type, "execution.completed")
              assert.deepStrictEqual(completedEvent.data, yield* flow.execution(completedId))
              assert.strictEqual(completedEvent.data.status, "completed")
              assert.strictEqual(completed.headers["content-type"], "application/json")
              assert.match(completed.headers["user-agent"] ?? "", /agent-host/)
              assert.match(completed.headers["webhook-id"] ?? "", /^msg_/)

              // Failed: the provider answers 500 (no retries in this service).
              fake.script({ status: 500 })
              const failedId = yield* flow.execute()
              const failedEvent = verify(secret, yield* finished(failedId))
              assert.strictEqual(failedEvent.type, "execution.failed")
              assert.deepStrictEqual(failedEvent.data, yield* flow.execution(failedId))
              assert.strictEqual(failedEvent.data.status, "failed")

              // Cancelled while its step waits on the provider.
              fake.script({ delayMs: 5_000 })
              const cancelledId = yield* flow.execute()
              yield* eventually(Effect.sync(() => assert.isAtLeast(fake.requests.length, 3, "the step started")))
              const cancel = yield* client.request("POST", `/api/v1/executions/${cancelledId}/cancel`, {
                headers: flow.auth
              })
              assert.strictEqual(cancel.status, 202, cancel.text)
              const cancelledEvent = verify(secret, yield* finished(cancelledId))
              assert.strictEqual(cancelledEvent.type, "execution.cancelled")
              assert.deepStrictEqual(cancelledEvent.data, yield* flow.execution(cancelledId))

              // One event each, one attempt each.
              yield* Effect.sleep("300 millis")
              assert.strictEqual(receiver.requests.length, 3)
              assert.strictEqual(new Set(receiver.requests.map((request) => request.headers["webhook-id"])).size, 3)
              const log = yield* flow.deliveries()
              assert.strictEqual(log.status, 200, log.text)
              assert.strictEqual(log.body.total, 3)
              assert.deepStrictEqual(
                log.body.data.map((attempt: any) => [
                  attempt.type,
                  attempt.subjectId,
                  attempt.attempt,
                  attempt.redelivery,
                  attempt.httpStatus
                ]),
                [
                  ["execution.cancelled", cancelledId, 1, 0, 200],
                  ["execution.failed", failedId, 1, 0, 200],
                  ["execution.completed", completedId, 1, 0, 200]
                ]
              )
            })
          )
      )

      it.effect(
        "an orchestration without a webhook sends nothing and shows none; the key-authenticated view shows no webhook",
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const client = yield* TestClient
              const flow = yield* setUp({ model: "local", url: undefined })
              assert.deepStrictEqual(
                [
                  flow.created.outputWebhookUrl,
                  flow.created.webhookEnabled,
                  flow.created.webhookDisabledReason,
                  "signingSecret" in flow.created
                ],
                [null, false, null, false]
              )
              const executionId = yield* flow.execute()
              yield* eventually(
                Effect.map(flow.execution(executionId), (execution) =>
                  assert.strictEqual(execution.status, "completed")
                )
              )
              const log = yield* flow.deliveries()
              assert.deepStrictEqual(log.body, { data: [], total: 0, nextCursor: null })
              const v1 = yield* client.request("GET", "/api/v1/orchestrations", { headers: flow.auth })
              assert.strictEqual(v1.status, 200, v1.text)
              assert.deepStrictEqual(Object.keys(v1.body.data[0]).sort(), [
                "createdAt",
                "description",
                "id",
                "name",
                "status"
              ])
            })
          )
      )
    })

    describe("retries", () => {
      it.effect(
        "failures, a timeout and a redirect (not followed) are retried on the schedule; every attempt is logged",
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const receiver = yield* FakeReceiver.make
              const elsewhere = yield* FakeReceiver.make
              receiver.script(
                { status: 500, times: 2, body: "broken" },
                { delayMs: 1_500 },
                { status: 302, location: elsewhere.url("/moved") },
                { status: 204, body: "" }
              )
              const flow = yield* setUp({ model: "local", url: receiver.url() })
              const executionId = yield* flow.execute()
              const log = yield* eventually(
                Effect.map(flow.deliveries(), (response) => {
                  assert.isAtLeast(response.body.total, 5, "five attempts")
                  return response.body
                })
              )
              const attempts = [...log.data].reverse()
              assert.deepStrictEqual(
                attempts.map((attempt: any) => [attempt.attempt, attempt.httpStatus]),
                [
                  [1, 500],
                  [2, 500],
                  [3, null],
                  [4, 302],
                  [5, 204]
                ]
              )
              assert.strictEqual(attempts[0].error, "HTTP 500")
              // A loopback receiver is a private target: its answer is not kept.
              assert.isNull(attempts[0].response)
              assert.match(attempts[2].error, /No answer within 400 ms/)
              assert.isAtLeast(attempts[2].durationMs, 390)
              assert.match(
                attempts[3].error,
                /Redirect not followed \(HTTP 302, Location: http:\/\/127\.0\.0\.1:\d+\/moved\)/
              )
              assert.isNull(attempts[4].error)
              for (const attempt of attempts) {
                assert.strictEqual(attempt.subjectId, executionId)
                assert.strictEqual(attempt.url, receiver.url())
                assert.strictEqual(attempt.redelivery, 0)
              }
              assert.strictEqual(elsewhere.requests.length, 0)

              // The same event every time: one id, one body, each attempt signed afresh.
              const requests = receiver.requests
              assert.strictEqual(requests.length, 5)
              assert.strictEqual(new Set(requests.map((request) => request.headers["webhook-id"])).size, 1)
              assert.strictEqual(new Set(requests.map((request) => request.body)).size, 1)
              for (const request of requests) verify(flow.created.signingSecret, request)
              // The waits of the schedule, at least (the timed-out attempt adds its own 400 ms).
              for (let i = 1; i < requests.length; i++) {
                assert.isAtLeast(
                  requests[i]!.at - requests[i - 1]!.at,
                  schedule[i - 1]! - 10,
                  `wait before attempt ${i + 1}`
                )
              }

              // Paging through the log, newest first.
              const first = yield* flow.deliveries("?limit=2")
              assert.deepStrictEqual(
                first.body.data.map((attempt: any) => attempt.attempt),
                [5, 4]
              )
              assert.strictEqual(first.body.total, 5)
              const second = yield* flow.deliveries(`?limit=2&cursor=${first.body.nextCursor}`)
              assert.deepStrictEqual(
                second.body.data.map((attempt: any) => attempt.attempt),
                [3, 2]
              )
              const bad = yield* flow.deliveries("?cursor=bm9wZQ")
              assert.strictEqual(bad.status, 400, bad.text)
            })
          )
      )

      it.effect("a receiver that never succeeds gets every attempt of the schedule and no more", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ status: 503, times: 100 })
            const flow = yield* setUp({ model: "local", url: receiver.url() })
            yield* flow.execute()
            yield* eventually(
              Effect.sync(() => assert.isAtLeast(receiver.requests.length, schedule.length + 1, "every attempt"))
            )
            yield* Effect.sleep(`${schedule[schedule.length - 1]! + 300} millis`)
            assert.strictEqual(receiver.requests.length, schedule.length + 1)
            const orchestration = yield* flow.orchestration()
            // Failing for less than WEBHOOK_DISABLE_AFTER: still enabled.
            assert.isTrue(orchestration.webhookEnabled)
          })
        )
      )

      it.effect("410 Gone disables the webhook, and the orchestration says why", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            receiver.script({ status: 410 })
            const flow = yield* setUp({ model: "local", url: receiver.url() })
            yield* flow.execute()
            const disabled = yield* eventually(
              Effect.map(flow.orchestration(), (orchestration) => {
                assert.isFalse(orchestration.webhookEnabled, "the webhook is disabled")
                return orchestration
              })
            )
            assert.match(disabled.webhookDisabledReason, /410/)
            assert.strictEqual(disabled.outputWebhookUrl, receiver.url())
            // No retry, and the next execution sends nothing.
            yield* flow.execute()
            yield* Effect.sleep("600 millis")
            assert.strictEqual(receiver.requests.length, 1)
            // Turning it on again re-enables it.
            const enabled = yield* client.request("PUT", `/api/orchestrations/${flow.id}`, {
              headers: flow.session,
              body: { webhookEnabled: true }
            })
            assert.strictEqual(enabled.status, 200, enabled.text)
            assert.deepStrictEqual([enabled.body.webhookEnabled, enabled.body.webhookDisabledReason], [true, null])
            assert.isFalse("signingSecret" in enabled.body)
            yield* flow.execute()
            yield* eventually(
              Effect.sync(() => assert.isAtLeast(receiver.requests.length, 2, "a delivery after re-enabling"))
            )
          })
        )
      )
    })

    describe("redelivery and secrets", () => {
      it.effect("a redelivery sends the same event id with a new timestamp and signature, logged as a redelivery", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const flow = yield* setUp({ model: "local", url: receiver.url() })
            yield* flow.execute()
            const first = yield* eventually(Effect.sync(() => defined("the first delivery", receiver.requests[0])))
            const eventId = first.headers["webhook-id"]!
            // Wait for the next second, so the timestamp must differ.
            const firstTimestamp = Number(first.headers["webhook-timestamp"])
            yield* eventually(
              Effect.sync(() => assert.isAbove(Math.floor(Date.now() / 1000), firstTimestamp)),
              { timeoutMs: 2_000 }
            )

            const redelivered = yield* client.request(
              "POST",
              `/api/orchestrations/${flow.id}/deliveries/${eventId}/redeliver`,
              {
                headers: flow.session
              }
            )
            assert.strictEqual(redelivered.status, 202, redelivered.text)
            assert.deepStrictEqual(redelivered.body, { eventId, status: "pending" })
            const second = yield* eventually(Effect.sync(() => defined("the redelivery", receiver.requests[1])))
            assert.strictEqual(second.headers["webhook-id"], eventId)
            assert.strictEqual(second.body, first.body)
            assert.isAbove(Number(second.headers["webhook-timestamp"]), firstTimestamp)
            assert.notStrictEqual(second.headers["webhook-signature"], first.headers["webhook-signature"])
            verify(flow.created.signingSecret, second)
            const log = yield* eventually(
              Effect.map(flow.deliveries(), (response) => {
                assert.isAtLeast(response.body.total, 2, "the redelivery in the log")
                return response.body
              })
            )
            assert.deepStrictEqual(
              log.data.map((attempt: any) => [attempt.eventId, attempt.redelivery, attempt.attempt]),
              [
                [eventId, 1, 1],
                [eventId, 0, 1]
              ]
            )

            // Not an event of this orchestration: 404, for a made-up id and for another tenant's.
            const unknown = yield* client.request(
              "POST",
              `/api/orchestrations/${flow.id}/deliveries/msg_nope/redeliver`,
              {
                headers: flow.session
              }
            )
            assert.strictEqual(unknown.status, 404, unknown.text)
            const other = yield* setUp({ model: "local", url: undefined })
            const foreign = yield* client.request(
              "POST",
              `/api/orchestrations/${other.id}/deliveries/${eventId}/redeliver`,
              {
                headers: other.session
              }
            )
            assert.strictEqual(foreign.status, 404, foreign.text)
            const foreignOwner = yield* client.request(
              "POST",
              `/api/orchestrations/${flow.id}/deliveries/${eventId}/redeliver`,
              {
                headers: other.session
              }
            )
            assert.strictEqual(foreignOwner.status, 404, foreignOwner.text)
            const foreignLog = yield* client.request("GET", `/api/orchestrations/${flow.id}/deliveries`, {
              headers: other.session
            })
            assert.strictEqual(foreignLog.status, 404, foreignLog.text)
          })
        )
      )

      it.effect("the secret is shown once; after a rotation deliveries carry both signatures, each verifiable", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const flow = yield* setUp({ model: "local", url: receiver.url() })
            const oldSecret = flow.created.signingSecret as string

            // Never shown again: not by GET, the list, nor an update that changes the URL.
            const got = yield* flow.orchestration()
            assert.isFalse("signingSecret" in got)
            const listed = yield* client.request("GET", "/api/orchestrations", { headers: flow.session })
            assert.isFalse(JSON.stringify(listed.body).includes("whsec_"))
            const moved = yield* client.request("PUT", `/api/orchestrations/${flow.id}`, {
              headers: flow.session,
              body: { outputWebhookUrl: receiver.url("/other") }
            })
            assert.strictEqual(moved.status, 200, moved.text)
            assert.isFalse("signingSecret" in moved.body)
            assert.strictEqual(moved.body.outputWebhookUrl, receiver.url("/other"))

            const rotated = yield* client.request("POST", `/api/orchestrations/${flow.id}/webhook/secret`, {
              headers: flow.session
            })
            assert.strictEqual(rotated.status, 200, rotated.text)
            const newSecret = rotated.body.signingSecret as string
            assert.match(newSecret, /^whsec_/)
            assert.notStrictEqual(newSecret, oldSecret)
            assert.isAbove(new Date(rotated.body.previousSecretExpiresAt).getTime(), Date.now() + 23 * 3600_000)
            assert.isFalse(JSON.stringify(yield* flow.orchestration()).includes("whsec_"))

            yield* flow.execute()
            const request = yield* eventually(Effect.sync(() => defined("a delivery", receiver.requests[0])))
            assert.strictEqual(request.path, "/other")
            const signatures = request.headers["webhook-signature"]!.split(" ")
            assert.strictEqual(signatures.length, 2)
            verify(newSecret, request)
            verify(oldSecret, request)
            // Each signature is verifiable on its own with its own secret.
            const only = (signature: string) => ({
              ...request,
              headers: { ...request.headers, "webhook-signature": signature }
            })
            verify(newSecret, only(signatures[0]!))
            verify(oldSecret, only(signatures[1]!))
            assert.throws(() => verify(oldSecret, only(signatures[0]!)))
            assert.throws(() => verify(`whsec_${Crypto.randomBytes(32).toString("base64")}`, request))

            // Without a webhook there is nothing to rotate.
            const bare = yield* setUp({ model: "local", url: undefined })
            const conflict = yield* client.request("POST", `/api/orchestrations/${bare.id}/webhook/secret`, {
              headers: bare.session
            })
            assert.strictEqual(conflict.status, 409, conflict.text)
            // Removing the URL removes the webhook.
            const removed = yield* client.request("PUT", `/api/orchestrations/${flow.id}`, {
              headers: flow.session,
              body: { outputWebhookUrl: null }
            })
            assert.deepStrictEqual([removed.body.outputWebhookUrl, removed.body.webhookEnabled], [null, false])
            // Setting one again makes (and shows) a new secret.
            const again = yield* client.request("PUT", `/api/orchestrations/${flow.id}`, {
              headers: flow.session,
              body: { outputWebhookUrl: receiver.url() }
            })
            assert.match(again.body.signingSecret, /^whsec_/)
          })
        )
      )
    })
  }
)

layer(TestServer.layer({ ...settings, webhookDisableAfter: Duration.millis(1) }), { excludeTestServices: true })(
  "an endpoint failing for WEBHOOK_DISABLE_AFTER",
  (it) => {
    it.effect("is disabled, with the reason shown on the orchestration", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          receiver.script({ status: 500, times: 100 })
          const flow = yield* setUp({ model: "local", url: receiver.url() })
          yield* flow.execute()
          const disabled = yield* eventually(
            Effect.map(flow.orchestration(), (orchestration) => {
              assert.isFalse(orchestration.webhookEnabled, "the webhook is disabled")
              return orchestration
            })
          )
          assert.match(disabled.webhookDisabledReason, /WEBHOOK_DISABLE_AFTER/)
          // The first failure starts the clock, the next one finds it run out: no more attempts after that.
          yield* Effect.sleep("700 millis")
          assert.strictEqual(receiver.requests.length, 2)
        })
      )
    )
  }
)

layer(ExecutionsRepo.layer.pipe(Layer.provideMerge(TestServer.layer(settings))), { excludeTestServices: true })(
  "the timeout sweep",
  (it) => {
    it.effect("an execution it fails sends execution.failed; one without a webhook is failed the same", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const repo = yield* ExecutionsRepo
          const receiver = yield* FakeReceiver.make
          const hooked = yield* setUp({ model: "local", url: receiver.url() })
          const bare = yield* setUp({ model: "local", url: undefined })
          // Stored as execute stores them, with no workflow to run them (their node died).
          const store = (flow: typeof hooked) =>
            Effect.map(
              repo.insert({
                id: newId(),
                tenantId: TenantId.make(flow.account.tenantId),
                orchestrationId: flow.id,
                input: "hi",
                variables: {},
                steps: [{ id: "s", agentId: AgentId.make(flow.agentId), prompt: "Say {{input}}" }],
                timeoutMs: 1_000,
                idempotencyKey: null,
                requestHash: null
              }),
              (claimed) => claimed.id
            )
          const hookedId = yield* store(hooked)
          const bareId = yield* store(bare)
          yield* Effect.sleep("1100 millis")
          const reaped = yield* repo.failTimedOut(0)
          assert.includeMembers([...reaped], [hookedId, bareId])
          const request = yield* eventually(Effect.sync(() => defined("the event", receiver.requests[0])))
          const event = verify(hooked.created.signingSecret, request)
          assert.strictEqual(event.type, "execution.failed")
          assert.deepStrictEqual(event.data, yield* hooked.execution(hookedId))
          assert.match(event.data.error, /timed out after 1000 ms/)
          assert.strictEqual((yield* bare.execution(bareId)).status, "failed")
          // Reaped once: a second sweep finds nothing.
          assert.deepStrictEqual(yield* repo.failTimedOut(0), [])
        })
      )
    )
  }
)
