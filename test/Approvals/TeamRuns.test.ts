import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// A team member's tool call under an approval policy (docs/approvals.md): the
// run waits (`waiting`) on the member's turn, then goes on once decided.

const mission = 'Find the order: call lookup_order {"id": "A-1"}'

const setUp = (receiverUrl: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const session = { headers: TestServer.bearer(account.token) }
    const { key } = yield* TestServer.createKey(account, ["teams", "approvals"])
    const tool = yield* client.request("POST", "/api/tools", {
      ...session,
      body: { ...lookupTool(receiverUrl), policy: { approval: "always" } }
    })
    assert.strictEqual(tool.status, 201, tool.text)
    const a = yield* TestServer.createAgent(account, { name: "A", model: "local", toolIds: [tool.body.id] })
    const b = yield* TestServer.createAgent(account, { name: "B", model: "local" })
    const team = yield* createTeam(account, {
      members: [
        { agentId: a.id, role: "looks things up" },
        { agentId: b.id, role: "sums up" }
      ]
    })
    const auth = { headers: TestServer.bearer(key) }
    const pending = (runId: string) =>
      eventually(
        Effect.map(client.request("GET", `/api/v1/approvals?status=pending&runId=${runId}`, auth), (response) => {
          assert.strictEqual(response.status, 200, response.text)
          assert.strictEqual(response.body.data.length, 1, response.text)
          return response.body.data[0]
        }),
        { timeoutMs: 30_000 }
      )
    const status = (runId: string) =>
      Effect.map(
        client.request("GET", `/api/v1/teams/${team.id}/runs/${runId}`, auth),
        (response) => response.body.data.status as string
      )
    const decide = (id: string, body: Record<string, unknown>) =>
      client.request("POST", `/api/v1/approvals/${id}/decision`, { ...auth, body })
    return { account, key, team, pending, status, decide }
  })

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })(
  "team runs with approvals",
  (it) => {
    describe("a member's call that needs approval", () => {
      it.effect("waits on the member's turn, then is made once approved", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
            const run = yield* setUp(receiver.url("/orders/{{args.id}}"))
            const runId = yield* startRun(run.key, run.team.id, mission)
            const approval = yield* run.pending(runId)
            assert.deepInclude(approval, {
              runKind: "team_run",
              runId,
              step: null,
              turn: "turn-0",
              tool: "lookup_order"
            })
            yield* eventually(
              Effect.map(run.status(runId), (status) => assert.strictEqual(status, "waiting")),
              {
                timeoutMs: 30_000
              }
            )
            assert.strictEqual(receiver.requests.length, 0)
            assert.strictEqual((yield* run.decide(approval.id, { decision: "approve" })).status, 200)
            const done = yield* awaitRun(run.account, run.team.id, runId)
            assert.strictEqual(done.status, "completed", JSON.stringify(done))
            assert.include(done.transcript.data[0]!.content, "shipped")
            assert.strictEqual(receiver.requests.length, 1)
            assert.strictEqual(receiver.requests[0]!.headers["idempotency-key"], `${runId}:turn-0:local_call_1`)
          })
        )
      )

      it.effect("rejected: the member reads the rejection, with the note", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            const run = yield* setUp(receiver.url("/orders/{{args.id}}"))
            const runId = yield* startRun(run.key, run.team.id, mission)
            const approval = yield* run.pending(runId)
            assert.strictEqual(
              (yield* run.decide(approval.id, { decision: "reject", note: "not this one" })).status,
              200
            )
            const done = yield* awaitRun(run.account, run.team.id, runId)
            assert.strictEqual(done.status, "completed", JSON.stringify(done))
            assert.include(done.transcript.data[0]!.content, "lookup_order failed")
            assert.include(done.transcript.data[0]!.content, "not this one")
            assert.strictEqual(receiver.requests.length, 0)
          })
        )
      )
    })
  }
)
