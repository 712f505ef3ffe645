import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { Webhook } from "standardwebhooks"
import { newId } from "../../src/Domain/Ids.ts"
import { TeamRuns } from "../../src/Teams/TeamRuns.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { awaitRun, teamOf } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { signUp } from "../support/TestServer.ts"

// The service with the team runs' sweeps, as `npm start` runs it, models on a fake OpenAI.
const withSweeps = Layer.unwrap(
  Effect.gen(function* () {
    const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
    return TeamRuns.sweeper.pipe(
      Layer.provide(TeamRuns.layer),
      Layer.provideMerge(
        TestServer.layer({
          openaiBaseUrl: openai.url,
          openaiApiKey: Option.some(Redacted.make(openaiKey)),
          modelTimeout: Duration.seconds(60),
          modelMaxRetries: 0,
          enforceDailyLimits: false,
          webhookAllowPrivate: true
        })
      ),
      Layer.merge(Layer.succeed(FakeOpenAi, openai))
    )
  })
)

/** Stores a run as the run route would, minus its workflow's start (a crash in between), `age` ago. */
const storeRun = (
  tenantId: string,
  team: any,
  agents: ReadonlyArray<{ id: string; name: string }>,
  options: {
    readonly status: "pending" | "running"
    readonly timeoutMs: number
    readonly ageSeconds: number
  }
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const id = newId()
    const snapshot = {
      members: agents.map((agent) => ({ agentId: agent.id, role: "member", name: agent.name })),
      turnTaking: "round_robin",
      leaderAgentId: null,
      maxTurns: team.maxTurns,
      tokenBudget: team.tokenBudget,
      timeoutMs: options.timeoutMs
    }
    yield* sql`INSERT INTO team_runs (id, tenant_id, team_id, mode, status, mission, snapshot, timeout_ms, created_at)
               VALUES (${id}, ${tenantId}, ${team.id}, 'chat', ${options.status}, 'Recovered', ${JSON.stringify(snapshot)}::jsonb,
                       ${options.timeoutMs}, now() - make_interval(secs => ${options.ageSeconds}))`
    return id
  }).pipe(Effect.orDie)

layer(withSweeps, { excludeTestServices: true })("team run sweeps", (it) => {
  it.effect("a run stored without its workflow's start is started by the sweeps and completes", () =>
    Effect.gen(function* () {
      const account = yield* signUp()
      const { team, agents } = yield* teamOf(account, "local", 2)
      const runId = yield* storeRun(account.tenantId, team, agents, {
        status: "pending",
        timeoutMs: 600_000,
        ageSeconds: 20
      })
      const run = yield* awaitRun(account, team.id, runId, 20_000)
      assert.strictEqual(run.status, "completed", JSON.stringify(run))
      assert.strictEqual(run.stopReason, "done")
      assert.strictEqual(run.turns, 2)
    })
  )

  it.effect(
    "a run far past its timeout whose workflow cannot end it is failed by the sweep, with its webhook event",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.setDefault({ hang: true })
          const receiver = yield* FakeReceiver.make
          const account = yield* signUp()
          const { team, agents } = yield* teamOf(account, "openai/gpt-4o-mini", 1, {
            room: { outputWebhookUrl: receiver.url("/swept") }
          })
          // Nothing starts it before the sweeps' next minute, and its model hangs (a closing turn would
          // wait TEAM_CLOSING_TURN_TIMEOUT, 30 s): only the timeout sweep (every 5 s) can end it sooner.
          const runId = yield* storeRun(account.tenantId, team, agents, {
            status: "running",
            timeoutMs: 1_000,
            ageSeconds: 3_600
          })
          const run = yield* awaitRun(account, team.id, runId, 20_000)
          assert.strictEqual(run.status, "failed", JSON.stringify(run))
          assert.strictEqual(run.stopReason, "timeout")
          assert.strictEqual(run.error, "The run did not finish within its timeout of 1000 ms")
          const delivered = yield* eventually(Effect.sync(() => defined("the event", receiver.requests[0])))
          const event = new Webhook(team.room.signingSecret!).verify(delivered.body, delivered.headers) as any
          assert.strictEqual(event.type, "team.run.failed")
          assert.strictEqual(event.data.runId, runId)
          fake.setDefault({})
        })
      )
  )
})
