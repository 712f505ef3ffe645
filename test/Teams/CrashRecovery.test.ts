import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import { request, requestJson, signUpTenant } from "../support/Cluster.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { spawnService, waitReady } from "../support/Process.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

/** The turn a request to the fake is for: the transcript lines its prompt shows. */
const turnOf = (body: any): number => {
  const prompt = body.messages.at(-1).content as string
  return (prompt.match(/^\[\d+\] /gm) ?? []).length
}

describe("team run crash recovery", () => {
  it.live(
    "a run killed with its process (kill -9) mid-turn completes after a restart; no completed turn is asked twice; one signed event",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        const receiver = yield* FakeReceiver.make
        const env = {
          DATABASE_URL: databaseUrl,
          OPENAI_BASE_URL: fake.url,
          OPENAI_API_KEY: openaiKey,
          WEBHOOK_ALLOW_PRIVATE: "true",
          WEBHOOK_SECRET_KEY: Crypto.randomBytes(32).toString("base64")
        }
        // Turns 0 and 1 answer quickly, turn 2 slowly: the kill lands while it is in flight.
        fake.script({ delayMs: 100, text: "Turn zero." }, { delayMs: 100, text: "Turn one." })
        fake.setDefault({ delayMs: 5_000, text: "Turn two.\nFINAL ANSWER: the crash-proof answer" })

        const first = yield* spawnService(env)
        yield* waitReady(first)
        const setup = yield* Effect.promise(async () => {
          const tenant = await signUpTenant(first.baseUrl, "team-crash@example.com")
          const agents = []
          for (const name of ["A", "B", "C"]) {
            agents.push(
              await requestJson(`${first.baseUrl}/api/agents`, {
                method: "POST",
                headers: tenant.session,
                body: { name, model: "openai/gpt-4o-mini" }
              })
            )
          }
          const team = await requestJson(`${first.baseUrl}/api/teams`, {
            method: "POST",
            headers: tenant.session,
            body: {
              name: "Durable",
              members: agents.map((agent) => ({ agentId: agent.id, role: "member" })),
              room: { outputWebhookUrl: receiver.url("/crash") }
            }
          })
          const started = await request(`${first.baseUrl}/api/public/teams/${team.id}/run`, {
            method: "POST",
            headers: { "x-api-key": tenant.key },
            body: { mission: "Survive a crash" }
          })
          assert.strictEqual(started.status, 202, started.text)
          return {
            tenant,
            teamId: team.id as string,
            secret: team.room.signingSecret as string,
            runId: started.body.data.runId as string
          }
        })

        const asked = (turn: number) => fake.requests.filter((r) => turnOf(r.body) === turn).length
        yield* Effect.promise(() =>
          eventually(() => assert.isAbove(asked(2), 0, "turn 2 in flight"), { timeoutMs: 20_000, intervalMs: 100 })
        )
        assert.strictEqual(asked(0), 1)
        assert.strictEqual(asked(1), 1)
        first.child.kill("SIGKILL")
        yield* Effect.promise(() => first.exited)
        fake.setDefault({ delayMs: 100, text: "Turn two.\nFINAL ANSWER: the crash-proof answer" })

        const second = yield* spawnService(env)
        yield* waitReady(second)
        const run = yield* Effect.promise(() =>
          eventually(
            async () => {
              const got = await request(`${second.baseUrl}/api/v1/teams/${setup.teamId}/runs/${setup.runId}`, {
                headers: { authorization: `Bearer ${setup.tenant.key}` }
              })
              const final = got.status === 200 && ["completed", "failed", "cancelled"].includes(got.body.data.status)
              return defined("the run to finish", final ? got.body.data : undefined)
            },
            { timeoutMs: 90_000, intervalMs: 100 }
          )
        )
        assert.strictEqual(run.status, "completed", JSON.stringify(run))
        assert.strictEqual(run.stopReason, "done")
        assert.strictEqual(run.result, "the crash-proof answer")
        assert.strictEqual(run.turns, 3)
        assert.deepStrictEqual(
          run.transcript.data.map((e: any) => [e.index, e.content]),
          [
            [0, "Turn zero."],
            [1, "Turn one."],
            [2, "Turn two.\nFINAL ANSWER: the crash-proof answer"]
          ]
        )
        // Completed turns were never asked again; the one in flight was.
        assert.strictEqual(asked(0), 1, "turn 0")
        assert.strictEqual(asked(1), 1, "turn 1")
        assert.isAtLeast(asked(2), 2, "turn 2")

        // Exactly one event, signed with the room's secret, whose data is the run.
        const delivered = yield* Effect.promise(() =>
          eventually(() => defined("the event", receiver.requests[0]), { timeoutMs: 30_000, intervalMs: 100 })
        )
        // A deliberate quiet window: no second copy of the event arrives.
        yield* quietWindow(1_000)
        assert.strictEqual(receiver.requests.length, 1)
        const event = new Webhook(setup.secret).verify(delivered.body, delivered.headers) as any
        assert.strictEqual(event.type, "team.run.completed")
        const { transcript: _, ...withoutTranscript } = run
        assert.deepStrictEqual(event.data, withoutTranscript)
        second.child.kill("SIGTERM")
        yield* Effect.promise(() => second.exited)
      }),
    180_000
  )
})
