import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import type { AppSettings } from "../../src/Config.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { bearer, createAgent, createKey, signUp, TestClient } from "../support/TestServer.ts"

// The room's output webhook through the real service: a receiver on loopback
// (hence WEBHOOK_ALLOW_PRIVATE), signatures checked with the official
// `standardwebhooks` package.

const settings: Partial<AppSettings> = {
  webhookAllowPrivate: true,
  webhookRetrySchedule: [150, 200, 250].map((ms) => Duration.millis(ms)),
  webhookTimeout: Duration.millis(1_000),
  webhookSecretKey: Option.some(Redacted.make(Crypto.randomBytes(32).toString("base64")))
}

const verify = (secret: string, request: FakeReceiver.ReceivedRequest) =>
  new Webhook(secret).verify(request.body, request.headers) as { type: string; timestamp: string; data: any }

const withoutTranscript = ({ transcript: _, ...run }: any) => run

layer(TestServer.layerWithFakeOpenAi(openaiKey, settings), { excludeTestServices: true })("room webhooks", (it) => {
  it.effect(
    "a run's final state sends one signed event whose data is the run as GET shows it, for completed, failed and cancelled",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const fake = yield* FakeOpenAi
          fake.reset()
          const receiver = yield* FakeReceiver.make
          const account = yield* signUp()
          const session = bearer(account.token)
          const { key } = yield* createKey(account, ["teams"])
          const local = yield* createAgent(account, { name: "Local", model: "local" })
          const remote = yield* createAgent(account, { name: "Remote", model: "openai/gpt-4o-mini" })
          const team = yield* createTeam(account, {
            members: [{ agentId: local.id, role: "thinker" }],
            room: { outputWebhookUrl: receiver.url("/hook") }
          })
          const secret = team.room.signingSecret as string
          assert.match(secret, /^whsec_[A-Za-z0-9+/=]+$/)
          assert.deepStrictEqual(
            { ...team.room, signingSecret: undefined },
            {
              outputWebhookUrl: receiver.url("/hook"),
              webhookEnabled: true,
              webhookDisabledReason: null,
              signingSecret: undefined
            }
          )
          // Shown once.
          const read = yield* client.request("GET", `/api/teams/${team.id}`, { headers: session })
          assert.notProperty(read.body.room, "signingSecret")
          assert.strictEqual(read.body.room.outputWebhookUrl, receiver.url("/hook"))

          const completedId = yield* startRun(key, team.id, "Think")
          const completed = yield* awaitRun(account, team.id, completedId)
          const first = yield* eventually(Effect.sync(() => defined("the completed event", receiver.requests[0])))
          const event = verify(secret, first)
          assert.strictEqual(event.type, "team.run.completed")
          assert.deepStrictEqual(event.data, withoutTranscript(completed))
          assert.isString(first.headers["webhook-id"])

          // A provider failure, then a cancel.
          const updated = yield* client.request("PUT", `/api/teams/${team.id}`, {
            headers: session,
            body: { members: [{ agentId: remote.id, role: "talker" }] }
          })
          assert.strictEqual(updated.status, 200, updated.text)
          assert.notProperty(updated.body.room, "signingSecret")
          fake.script({ status: 400, message: "refused by the fake" })
          const failedId = yield* startRun(key, team.id, "Fail")
          const failed = yield* awaitRun(account, team.id, failedId)
          assert.strictEqual(failed.status, "failed")
          const second = yield* eventually(Effect.sync(() => defined("the failed event", receiver.requests[1])))
          assert.strictEqual(verify(secret, second).type, "team.run.failed")
          assert.deepStrictEqual(verify(secret, second).data, withoutTranscript(failed))

          fake.setDefault({ hang: true })
          const cancelledId = yield* startRun(key, team.id, "Wait")
          yield* eventually(Effect.sync(() => assert.isAtLeast(fake.requests.length, 2, "the hanging turn")))
          const cancel = yield* client.request("POST", `/api/teams/${team.id}/runs/${cancelledId}/cancel`, {
            headers: session
          })
          assert.strictEqual(cancel.status, 202, cancel.text)
          fake.setDefault({})
          const third = yield* eventually(Effect.sync(() => defined("the cancelled event", receiver.requests[2])))
          const cancelled = verify(secret, third)
          assert.strictEqual(cancelled.type, "team.run.cancelled")
          assert.strictEqual(cancelled.data.runId, cancelledId)
          assert.strictEqual(cancelled.data.stopReason, "cancelled")
          assert.deepStrictEqual(cancelled.data, withoutTranscript(yield* awaitRun(account, team.id, cancelledId)))

          // One event per run: nothing more arrives.
          yield* Effect.sleep("500 millis")
          assert.strictEqual(receiver.requests.length, 3)
          assert.strictEqual(new Set(receiver.requests.map((r) => r.headers["webhook-id"])).size, 3)

          // The delivery log, and a redelivery: same id, a new signature.
          const log = yield* client.request("GET", `/api/teams/${team.id}/deliveries`, { headers: session })
          assert.strictEqual(log.status, 200, log.text)
          assert.strictEqual(log.body.total, 3)
          assert.deepStrictEqual(
            log.body.data.map((a: any) => a.httpStatus),
            [200, 200, 200]
          )
          const eventId = first.headers["webhook-id"]!
          const again = yield* client.request("POST", `/api/teams/${team.id}/deliveries/${eventId}/redeliver`, {
            headers: session
          })
          assert.strictEqual(again.status, 202, again.text)
          const redelivered = yield* eventually(Effect.sync(() => defined("the redelivery", receiver.requests[3])))
          assert.strictEqual(redelivered.headers["webhook-id"], eventId)
          assert.strictEqual(verify(secret, redelivered).type, "team.run.completed")
        })
      )
  )

  it.effect(
    "rotating the room's secret: shown once, both secrets verify during the overlap; another tenant's room is 404",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const receiver = yield* FakeReceiver.make
          const account = yield* signUp()
          const session = bearer(account.token)
          const { key } = yield* createKey(account, ["teams"])
          const agent = yield* createAgent(account, { name: "Local", model: "local" })
          // No webhook at first: rotating has nothing to rotate.
          const team = yield* createTeam(account, { members: [{ agentId: agent.id }] })
          assert.deepStrictEqual(team.room, {
            outputWebhookUrl: null,
            webhookEnabled: false,
            webhookDisabledReason: null
          })
          const none = yield* client.request("POST", `/api/teams/${team.id}/room/secret`, { headers: session })
          assert.strictEqual(none.status, 409, none.text)

          const set = yield* client.request("PUT", `/api/teams/${team.id}`, {
            headers: session,
            body: { room: { outputWebhookUrl: receiver.url("/room") } }
          })
          assert.strictEqual(set.status, 200, set.text)
          const oldSecret = set.body.room.signingSecret as string
          assert.isString(oldSecret)
          const rotated = yield* client.request("POST", `/api/teams/${team.id}/room/secret`, { headers: session })
          assert.strictEqual(rotated.status, 200, rotated.text)
          const newSecret = rotated.body.signingSecret as string
          assert.notStrictEqual(newSecret, oldSecret)
          assert.isString(rotated.body.previousSecretExpiresAt)

          const runId = yield* startRun(key, team.id, "Rotate")
          yield* awaitRun(account, team.id, runId)
          const delivered = yield* eventually(Effect.sync(() => defined("the event", receiver.requests[0])))
          assert.strictEqual(verify(newSecret, delivered).data.runId, runId)
          assert.strictEqual(verify(oldSecret, delivered).data.runId, runId)

          // Disabled: a run sends nothing.
          const off = yield* client.request("PUT", `/api/teams/${team.id}`, {
            headers: session,
            body: { room: { webhookEnabled: false } }
          })
          assert.strictEqual(off.body.room.webhookEnabled, false)
          const quiet = yield* startRun(key, team.id, "Quiet")
          yield* awaitRun(account, team.id, quiet)
          yield* Effect.sleep("500 millis")
          assert.strictEqual(receiver.requests.length, 1)

          const other = yield* signUp()
          for (const [method, path] of [
            ["POST", `/api/teams/${team.id}/room/secret`],
            ["GET", `/api/teams/${team.id}/deliveries`],
            ["POST", `/api/teams/${team.id}/deliveries/${delivered.headers["webhook-id"]}/redeliver`]
          ] as const) {
            const refused = yield* client.request(method, path, { headers: bearer(other.token) })
            assert.strictEqual(refused.status, 404, `${method} ${path}: ${refused.text}`)
          }
          // A URL that is not http(s) is a 400 naming the room's field.
          const bad = yield* client.request("PUT", `/api/teams/${team.id}`, {
            headers: session,
            body: { room: { outputWebhookUrl: "ftp://example.com/hook" } }
          })
          assert.strictEqual(bad.status, 400, bad.text)
          assert.deepStrictEqual(
            bad.body.errors.map((e: any) => e.path.join(".")),
            ["payload.room.outputWebhookUrl"]
          )
          // Deleting the team forgets its room.
          const removed = yield* client.request("DELETE", `/api/teams/${team.id}`, { headers: session })
          assert.strictEqual(removed.status, 204)
          const gone = yield* client.request("GET", `/api/teams/${team.id}/deliveries`, { headers: session })
          assert.strictEqual(gone.status, 404)
        })
      )
  )
})
