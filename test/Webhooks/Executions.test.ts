import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import type { AppSettings } from "../../src/Config.ts"
import { AgentId, newId, TenantId } from "../../src/Domain/Ids.ts"
import { Conflict, NotFound } from "../../src/Domain/Problems.ts"
import { ExecutionsRepo } from "../../src/Orchestrations/ExecutionsRepo.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { quietWindow } from "../support/QuietWindow.ts"
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
    const auth = TestServer.bearer(key.key)
    const api = yield* TestServer.apiClient(account.token)
    const keyApi = yield* TestServer.apiClient(key.key)
    const created = yield* api.orchestrations.create({
      payload: {
        name: "Hooked",
        steps: [{ id: "s", agentId: AgentId.make(agent.id), prompt: "Say {{input}}" }],
        ...(options.url === undefined ? {} : { outputWebhookUrl: options.url })
      }
    })
    const id = created.id
    const execute = (input = "hello") =>
      Effect.map(
        keyApi.v1Orchestrations.execute({ params: { id }, headers: {}, payload: { input } }),
        (started) => started.executionId
      )
    const execution = (executionId: string) => keyApi.v1Executions.get({ params: { id: executionId } })
    /** The execution as GET sends it, untyped: an event's data is compared with it as sent. */
    const executionAsSent = (executionId: string) =>
      Effect.map(
        client.request("GET", `/api/v1/executions/${executionId}`, { headers: auth }),
        (response) => response.body
      )
    const deliveries = (query: { readonly limit?: number; readonly cursor?: string } = {}) =>
      api.orchestrations.deliveries({ params: { id }, query })
    const orchestration = () => api.orchestrations.get({ params: { id } })
    return {
      account,
      api,
      keyApi,
      session,
      auth,
      agentId: agent.id,
      id,
      created,
      secret: created.signingSecret ?? "",
      execute,
      execution,
      executionAsSent,
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
              const fake = yield* FakeOpenAi
              fake.reset()
              const receiver = yield* FakeReceiver.make
              const flow = yield* setUp({ model: "openai/gpt-4o-mini", url: receiver.url() })
              const secret = flow.secret
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
              assert.deepStrictEqual(completedEvent.data, yield* flow.executionAsSent(completedId))
              assert.strictEqual(completedEvent.data.status, "completed")
              assert.strictEqual(completed.headers["content-type"], "application/json")
              assert.match(completed.headers["user-agent"] ?? "", /agent-host/)
              assert.match(completed.headers["webhook-id"] ?? "", /^msg_/)

              // Failed: the provider answers 500 (no retries in this service).
              fake.script({ status: 500 })
              const failedId = yield* flow.execute()
              const failedEvent = verify(secret, yield* finished(failedId))
              assert.strictEqual(failedEvent.type, "execution.failed")
              assert.deepStrictEqual(failedEvent.data, yield* flow.executionAsSent(failedId))
              assert.strictEqual(failedEvent.data.status, "failed")

              // Cancelled while its step waits on the provider.
              fake.script({ delayMs: 5_000 })
              const cancelledId = yield* flow.execute()
              yield* eventually(Effect.sync(() => assert.isAtLeast(fake.requests.length, 3, "the step started")))
              const cancel = yield* flow.keyApi.v1Executions.cancel({ params: { id: cancelledId } })
              assert.strictEqual(cancel.executionId, cancelledId)
              const cancelledEvent = verify(secret, yield* finished(cancelledId))
              assert.strictEqual(cancelledEvent.type, "execution.cancelled")
              assert.deepStrictEqual(cancelledEvent.data, yield* flow.executionAsSent(cancelledId))

              // One event each, one attempt each: a deliberate quiet window past the first retry's wait
              // (150 ms), in which a second attempt would have arrived.
              yield* quietWindow(300)
              assert.strictEqual(receiver.requests.length, 3)
              assert.strictEqual(new Set(receiver.requests.map((request) => request.headers["webhook-id"])).size, 3)
              const log = yield* eventually(
                Effect.map(flow.deliveries(), (page) => {
                  assert.isAtLeast(page.total, 3, "every attempt in the log")
                  return page
                })
              )
              assert.strictEqual(log.total, 3)
              assert.deepStrictEqual(
                log.data.map((attempt) => [
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
              assert.deepStrictEqual(log, { data: [], total: 0, nextCursor: null })
              // Raw: the exact fields the key-authenticated view sends.
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
                Effect.map(flow.deliveries(), (page) => {
                  assert.isAtLeast(page.total, 5, "five attempts")
                  return page
                })
              )
              const attempts = [...log.data].reverse()
              assert.deepStrictEqual(
                attempts.map((attempt) => [attempt.attempt, attempt.httpStatus]),
                [
                  [1, 500],
                  [2, 500],
                  [3, null],
                  [4, 302],
                  [5, 204]
                ]
              )
              assert.strictEqual(attempts[0]!.error, "HTTP 500")
              // A loopback receiver is a private target: its answer is not kept.
              assert.isNull(attempts[0]!.response)
              assert.match(attempts[2]!.error ?? "", /No answer within 400 ms/)
              assert.isAtLeast(attempts[2]!.durationMs, 390)
              assert.match(
                attempts[3]!.error ?? "",
                /Redirect not followed \(HTTP 302, Location: http:\/\/127\.0\.0\.1:\d+\/moved\)/
              )
              assert.isNull(attempts[4]!.error)
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
              for (const request of requests) verify(flow.secret, request)
              // The waits of the schedule, at least (the timed-out attempt adds its own 400 ms).
              for (let i = 1; i < requests.length; i++) {
                assert.isAtLeast(
                  requests[i]!.at - requests[i - 1]!.at,
                  schedule[i - 1]! - 10,
                  `wait before attempt ${i + 1}`
                )
              }

              // Paging through the log, newest first.
              const first = yield* flow.deliveries({ limit: 2 })
              assert.deepStrictEqual(
                first.data.map((attempt) => attempt.attempt),
                [5, 4]
              )
              assert.strictEqual(first.total, 5)
              const second = yield* flow.deliveries({ limit: 2, cursor: first.nextCursor! })
              assert.deepStrictEqual(
                second.data.map((attempt) => attempt.attempt),
                [3, 2]
              )
              // Raw: a cursor the typed client would refuse to encode.
              const client = yield* TestClient
              const bad = yield* client.request("GET", `/api/orchestrations/${flow.id}/deliveries?cursor=bm9wZQ`, {
                headers: flow.session
              })
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
            // A deliberate quiet window longer than the schedule's last wait: no attempt past the schedule.
            yield* quietWindow(schedule[schedule.length - 1]! + 300)
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
            assert.match(disabled.webhookDisabledReason ?? "", /410/)
            assert.strictEqual(disabled.outputWebhookUrl, receiver.url())
            // No retry, and the next execution sends nothing: once it has ended, a deliberate quiet window
            // past the schedule's first waits, in which a retry or its event would have arrived.
            const unsent = yield* flow.execute()
            yield* eventually(
              Effect.map(flow.execution(unsent), (execution) =>
                assert.include(["completed", "failed", "cancelled"], execution.status, "the execution ended")
              )
            )
            yield* quietWindow(600)
            assert.strictEqual(receiver.requests.length, 1)
            // Turning it on again re-enables it.
            const enabled = yield* flow.api.orchestrations.update({
              params: { id: flow.id },
              payload: { webhookEnabled: true }
            })
            assert.deepStrictEqual([enabled.webhookEnabled, enabled.webhookDisabledReason], [true, null])
            assert.isFalse("signingSecret" in enabled)
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

            const redeliver = (owner: typeof flow, eventId: string) =>
              owner.api.orchestrations.redeliver({ params: { id: owner.id, eventId } })
            const redelivered = yield* redeliver(flow, eventId)
            assert.deepStrictEqual(redelivered, { eventId, status: "pending" })
            const second = yield* eventually(Effect.sync(() => defined("the redelivery", receiver.requests[1])))
            assert.strictEqual(second.headers["webhook-id"], eventId)
            assert.strictEqual(second.body, first.body)
            assert.isAbove(Number(second.headers["webhook-timestamp"]), firstTimestamp)
            assert.notStrictEqual(second.headers["webhook-signature"], first.headers["webhook-signature"])
            verify(flow.secret, second)
            const log = yield* eventually(
              Effect.map(flow.deliveries(), (page) => {
                assert.isAtLeast(page.total, 2, "the redelivery in the log")
                return page
              })
            )
            assert.deepStrictEqual(
              log.data.map((attempt) => [attempt.eventId, attempt.redelivery, attempt.attempt]),
              [
                [eventId, 1, 1],
                [eventId, 0, 1]
              ]
            )

            // Not an event of this orchestration: 404, for a made-up id and for another tenant's.
            assert.instanceOf(yield* Effect.flip(redeliver(flow, "msg_nope")), NotFound)
            const other = yield* setUp({ model: "local", url: undefined })
            assert.instanceOf(yield* Effect.flip(redeliver(other, eventId)), NotFound)
            const foreignOwner = yield* Effect.flip(
              other.api.orchestrations.redeliver({ params: { id: flow.id, eventId } })
            )
            assert.instanceOf(foreignOwner, NotFound)
            const foreignLog = yield* Effect.flip(
              other.api.orchestrations.deliveries({ params: { id: flow.id }, query: {} })
            )
            assert.instanceOf(foreignLog, NotFound)
            assert.strictEqual(foreignLog.status, 404)
          })
        )
      )

      it.effect("the secret is shown once; after a rotation deliveries carry both signatures, each verifiable", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            const flow = yield* setUp({ model: "local", url: receiver.url() })
            const orchestrations = flow.api.orchestrations
            const params = { id: flow.id }
            const oldSecret = flow.secret

            // Never shown again: not by GET, the list, nor an update that changes the URL.
            const got = yield* flow.orchestration()
            assert.isFalse("signingSecret" in got)
            // The bytes as sent, not only what the client decodes.
            const [, listed] = yield* orchestrations.list({ query: {}, responseMode: "decoded-and-response" })
            assert.notInclude(yield* listed.text, "whsec_")
            const moved = yield* orchestrations.update({
              params,
              payload: { outputWebhookUrl: receiver.url("/other") }
            })
            assert.isFalse("signingSecret" in moved)
            assert.strictEqual(moved.outputWebhookUrl, receiver.url("/other"))

            const rotated = yield* orchestrations.rotateSecret({ params })
            const newSecret = rotated.signingSecret
            assert.match(newSecret, /^whsec_/)
            assert.notStrictEqual(newSecret, oldSecret)
            assert.isAbove(rotated.previousSecretExpiresAt?.getTime() ?? 0, Date.now() + 23 * 3600_000)
            const [, after] = yield* orchestrations.get({ params, responseMode: "decoded-and-response" })
            assert.notInclude(yield* after.text, "whsec_")

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
            const conflict = yield* Effect.flip(bare.api.orchestrations.rotateSecret({ params: { id: bare.id } }))
            assert.instanceOf(conflict, Conflict)
            assert.strictEqual(conflict.status, 409)
            // Removing the URL removes the webhook.
            const removed = yield* orchestrations.update({ params, payload: { outputWebhookUrl: null } })
            assert.deepStrictEqual([removed.outputWebhookUrl, removed.webhookEnabled], [null, false])
            // Setting one again makes (and shows) a new secret.
            const again = yield* orchestrations.update({ params, payload: { outputWebhookUrl: receiver.url() } })
            assert.match(again.signingSecret ?? "", /^whsec_/)
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
          assert.match(disabled.webhookDisabledReason ?? "", /WEBHOOK_DISABLE_AFTER/)
          // The first failure starts the clock, the next one finds it run out: no more attempts after that.
          // A deliberate quiet window past the schedule's next waits, in which a third attempt would have arrived.
          yield* quietWindow(700)
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
          // Once both are past their timeout (1 s, by the database's clock), the sweep fails them.
          const reaped = new Set<string>()
          yield* eventually(
            Effect.map(repo.failTimedOut(0), (ids) => {
              for (const id of ids) reaped.add(id)
              assert.isTrue(reaped.has(hookedId) && reaped.has(bareId), "both past their timeout")
            })
          )
          assert.includeMembers([...reaped], [hookedId, bareId])
          const request = yield* eventually(Effect.sync(() => defined("the event", receiver.requests[0])))
          const event = verify(hooked.secret, request)
          assert.strictEqual(event.type, "execution.failed")
          assert.deepStrictEqual(event.data, yield* hooked.executionAsSent(hookedId))
          assert.match(event.data.error, /timed out after 1000 ms/)
          assert.strictEqual((yield* bare.execution(bareId)).status, "failed")
          // Reaped once: a second sweep finds nothing.
          assert.deepStrictEqual(yield* repo.failTimedOut(0), [])
        })
      )
    )
  }
)
