import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Option, Redacted, Schema } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import type { AppSettings } from "../../src/Config.ts"
import { AgentId } from "../../src/Domain/Ids.ts"
import { BadRequest, Conflict, NotFound } from "../../src/Domain/Problems.ts"
import { TeamRun, type TeamRunWithTranscript } from "../../src/Teams/Api.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import { awaitRun, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { createAgent, createKey, signUp } from "../support/TestServer.ts"

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

// An event's data is the run as the routes send it, without its transcript: the run read back, encoded again.
const withoutTranscript = ({ transcript: _, ...run }: typeof TeamRunWithTranscript.Type) =>
  Schema.encodeSync(Schema.toCodecJson(TeamRun))(run)

/** An agent of the account on `model`, as a member's id. */
const agentOn = (account: TestServer.Account, name: string, model: string) =>
  Effect.map(createAgent(account, { name, model }), (agent) => AgentId.make(agent.id))

layer(TestServer.layerWithFakeOpenAi(openaiKey, settings), { excludeTestServices: true })("room webhooks", (it) => {
  it.effect(
    "a run's final state sends one signed event whose data is the run as GET shows it, for completed, failed and cancelled",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          const receiver = yield* FakeReceiver.make
          const account = yield* signUp()
          const teams = (yield* TestServer.apiClient(account.token)).teams
          const { key } = yield* createKey(account, ["teams"])
          const local = yield* agentOn(account, "Local", "local")
          const remote = yield* agentOn(account, "Remote", "openai/gpt-4o-mini")
          const team = yield* teams.create({
            payload: {
              name: "Team",
              members: [{ agentId: local, role: "thinker" }],
              room: { outputWebhookUrl: receiver.url("/hook") }
            }
          })
          const params = { id: team.id }
          const secret = team.room.signingSecret ?? ""
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
          const read = yield* teams.get({ params })
          assert.notProperty(read.room, "signingSecret")
          assert.strictEqual(read.room.outputWebhookUrl, receiver.url("/hook"))

          const completedId = yield* startRun(key, team.id, "Think")
          const completed = yield* awaitRun(account, team.id, completedId)
          const first = yield* eventually(Effect.sync(() => defined("the completed event", receiver.requests[0])))
          const event = verify(secret, first)
          assert.strictEqual(event.type, "team.run.completed")
          assert.deepStrictEqual(event.data, withoutTranscript(completed))
          assert.isString(first.headers["webhook-id"])

          // A provider failure, then a cancel.
          const updated = yield* teams.update({ params, payload: { members: [{ agentId: remote, role: "talker" }] } })
          assert.notProperty(updated.room, "signingSecret")
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
          const cancel = yield* teams.cancel({ params: { ...params, runId: cancelledId } })
          assert.strictEqual(cancel.runId, cancelledId)
          fake.setDefault({})
          const third = yield* eventually(Effect.sync(() => defined("the cancelled event", receiver.requests[2])))
          const cancelled = verify(secret, third)
          assert.strictEqual(cancelled.type, "team.run.cancelled")
          assert.strictEqual(cancelled.data.runId, cancelledId)
          assert.strictEqual(cancelled.data.stopReason, "cancelled")
          assert.deepStrictEqual(cancelled.data, withoutTranscript(yield* awaitRun(account, team.id, cancelledId)))

          // One event per run: nothing more arrives within a deliberate quiet window past the first retry's wait.
          yield* quietWindow(500)
          assert.strictEqual(receiver.requests.length, 3)
          assert.strictEqual(new Set(receiver.requests.map((r) => r.headers["webhook-id"])).size, 3)

          // The delivery log, and a redelivery: same id, a new signature.
          const log = yield* eventually(
            Effect.map(teams.deliveries({ params, query: {} }), (page) => {
              assert.isAtLeast(page.total, 3, "every attempt in the log")
              return page
            })
          )
          assert.strictEqual(log.total, 3)
          assert.deepStrictEqual(
            log.data.map((a) => a.httpStatus),
            [200, 200, 200]
          )
          const eventId = first.headers["webhook-id"]!
          const again = yield* teams.redeliver({ params: { ...params, eventId } })
          assert.deepStrictEqual(again, { eventId, status: "pending" })
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
          const receiver = yield* FakeReceiver.make
          const account = yield* signUp()
          const teams = (yield* TestServer.apiClient(account.token)).teams
          const { key } = yield* createKey(account, ["teams"])
          const agent = yield* agentOn(account, "Local", "local")
          // No webhook at first: rotating has nothing to rotate.
          const team = yield* teams.create({ payload: { name: "Team", members: [{ agentId: agent }] } })
          const params = { id: team.id }
          assert.deepStrictEqual(team.room, {
            outputWebhookUrl: null,
            webhookEnabled: false,
            webhookDisabledReason: null
          })
          const none = yield* Effect.flip(teams.rotateSecret({ params }))
          assert.instanceOf(none, Conflict)
          assert.strictEqual(none.status, 409)

          const set = yield* teams.update({ params, payload: { room: { outputWebhookUrl: receiver.url("/room") } } })
          const oldSecret = set.room.signingSecret ?? ""
          assert.isString(set.room.signingSecret)
          const rotated = yield* teams.rotateSecret({ params })
          const newSecret = rotated.signingSecret
          assert.notStrictEqual(newSecret, oldSecret)
          assert.instanceOf(rotated.previousSecretExpiresAt, Date)

          const runId = yield* startRun(key, team.id, "Rotate")
          yield* awaitRun(account, team.id, runId)
          const delivered = yield* eventually(Effect.sync(() => defined("the event", receiver.requests[0])))
          assert.strictEqual(verify(newSecret, delivered).data.runId, runId)
          assert.strictEqual(verify(oldSecret, delivered).data.runId, runId)

          // Disabled: a run sends nothing.
          const off = yield* teams.update({ params, payload: { room: { webhookEnabled: false } } })
          assert.strictEqual(off.room.webhookEnabled, false)
          const quiet = yield* startRun(key, team.id, "Quiet")
          yield* awaitRun(account, team.id, quiet)
          // A deliberate quiet window after the run ended, in which its event would have arrived.
          yield* quietWindow(500)
          assert.strictEqual(receiver.requests.length, 1)

          const theirs = (yield* TestServer.apiClient((yield* signUp()).token)).teams
          const eventId = delivered.headers["webhook-id"]!
          // Each route's refusal, flipped into the value to check.
          const refusals = [
            ["rotateSecret", Effect.flip(theirs.rotateSecret({ params }))],
            ["deliveries", Effect.flip(theirs.deliveries({ params, query: {} }))],
            ["redeliver", Effect.flip(theirs.redeliver({ params: { ...params, eventId } }))]
          ] as const
          for (const [route, refusal] of refusals) {
            const refused = yield* refusal
            assert.instanceOf(refused, NotFound, route)
            assert.strictEqual(refused.status, 404, route)
          }
          // A URL that is not http(s) is a 400 naming the room's field.
          const bad = yield* Effect.flip(
            teams.update({ params, payload: { room: { outputWebhookUrl: "ftp://example.com/hook" } } })
          )
          assert.instanceOf(bad, BadRequest)
          assert.deepStrictEqual(
            bad.errors?.map((e) => e.path.join(".")),
            ["payload.room.outputWebhookUrl"]
          )
          // Deleting the team forgets its room.
          const [, removed] = yield* teams.remove({ params, responseMode: "decoded-and-response" })
          assert.strictEqual(removed.status, 204)
          assert.instanceOf(yield* Effect.flip(teams.deliveries({ params, query: {} })), NotFound)
        })
      )
  )
})
