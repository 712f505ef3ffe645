import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { wakeSweepAfter, wakeSweepEvery } from "../../src/Approvals/Approvals.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// A decision is written, then the run's deferred completed. A node that dies
// between the two leaves a decision whose run sleeps on: the wake sweep
// completes the deferred again. Here the decision is written with SQL, as
// the dead node left it (its row and the run's flag, no deferred completed).

const mission = 'Find the order: call lookup_order {"id": "A-1"}'

/** The sweep's bound: a decision is at least `wakeSweepAfter` old, then seen within `wakeSweepEvery`, then run. */
const sweepBoundMs = Duration.toMillis(wakeSweepAfter) + Duration.toMillis(wakeSweepEvery) + 20_000

// Past the sweep's bound, the setup's own waits.
const testTimeoutMs = sweepBoundMs + 60_000

const setUp = Effect.gen(function* () {
  const client = yield* TestClient
  const receiver = yield* FakeReceiver.make
  receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
  const account = yield* TestServer.signUp()
  const session = { headers: TestServer.bearer(account.token) }
  const { key } = yield* TestServer.createKey(account, ["teams", "approvals"])
  const tool = yield* client.request("POST", "/api/tools", {
    ...session,
    body: { ...lookupTool(receiver.url("/orders/{{args.id}}")), policy: { approval: "always" } }
  })
  assert.strictEqual(tool.status, 201, tool.text)
  const agent = yield* TestServer.createAgent(account, { name: "A", model: "local", toolIds: [tool.body.id] })
  const summer = yield* TestServer.createAgent(account, { name: "B", model: "local" })
  const team = yield* createTeam(account, {
    members: [
      { agentId: agent.id, role: "looks things up" },
      { agentId: summer.id, role: "sums up" }
    ]
  })
  const auth = { headers: TestServer.bearer(key) }
  const runId = yield* startRun(key, team.id, mission)
  const approval = yield* eventually(
    Effect.map(client.request("GET", `/api/v1/approvals?status=pending&runId=${runId}`, auth), (response) => {
      assert.strictEqual(response.status, 200, response.text)
      assert.strictEqual(response.body.data.length, 1, response.text)
      return response.body.data[0] as { id: string }
    }),
    { timeoutMs: 30_000 }
  )
  yield* eventually(
    Effect.map(client.request("GET", `/api/v1/teams/${team.id}/runs/${runId}`, auth), (response) =>
      assert.strictEqual(response.body.data.status, "waiting")
    ),
    { timeoutMs: 30_000 }
  )
  const decide = (body: Record<string, unknown>) =>
    client.request("POST", `/api/v1/approvals/${approval.id}/decision`, { ...auth, body })
  return { account, team, runId, approval, receiver, decide }
})

const wokenAt = (id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ readonly wokenAt: Date | null }>`SELECT woken_at FROM approvals WHERE id = ${id}`
    return rows[0]!.wokenAt
  })

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })(
  "the approvals' wake sweep",
  (it) => {
    it.effect(
      "a decision whose wake was lost: the run goes on within the sweep's bound, the call made once",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            const run = yield* setUp
            // As the decision's transaction leaves it; its node died before completing the deferred.
            const decided = yield* sql`UPDATE approvals
          SET status = 'approved', decided_by = 'user:gone', decided_at = now(), note = 'decided on a node that died'
          WHERE id = ${run.approval.id} AND status = 'pending' RETURNING id`
            assert.strictEqual(decided.length, 1)
            yield* sql`UPDATE team_runs SET waiting = false WHERE id = ${run.runId}`
            const decidedAt = Date.now()
            assert.isNull(yield* wokenAt(run.approval.id))

            const done = yield* awaitRun(run.account, run.team.id, run.runId, sweepBoundMs)
            assert.strictEqual(done.status, "completed", JSON.stringify(done))
            assert.include(done.transcript.data[0]!.content, "shipped")
            // Nothing but the sweep woke it: not before the decision was old enough.
            assert.isAtLeast(Date.now() - decidedAt, Duration.toMillis(wakeSweepAfter) - 1_000)
            assert.isNotNull(yield* wokenAt(run.approval.id))
            assert.strictEqual(run.receiver.requests.length, 1)
            assert.strictEqual(run.receiver.requests[0]!.headers["idempotency-key"], `${run.runId}:turn-0:local_call_1`)
          })
        ),
      testTimeoutMs
    )

    it.effect(
      "a decision that woke its run is recorded woken; one of a run that ended is only marked",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            const run = yield* setUp
            assert.strictEqual((yield* run.decide({ decision: "approve" })).status, 200)
            assert.isNotNull(yield* wokenAt(run.approval.id))
            const done = yield* awaitRun(run.account, run.team.id, run.runId)
            assert.strictEqual(done.status, "completed", JSON.stringify(done))
            // Its wake forgotten, long ago: the run has ended, so the sweep marks it and wakes nothing.
            yield* sql`UPDATE approvals SET woken_at = NULL, decided_at = now() - interval '1 minute'
                   WHERE id = ${run.approval.id}`
            yield* eventually(
              Effect.map(wokenAt(run.approval.id), (at) => assert.isNotNull(at)),
              { timeoutMs: sweepBoundMs }
            )
            yield* quietWindow(1_000)
            assert.strictEqual(run.receiver.requests.length, 1)
            const again = yield* awaitRun(run.account, run.team.id, run.runId)
            assert.deepStrictEqual(again, done)
          })
        ),
      testTimeoutMs
    )
  }
)
