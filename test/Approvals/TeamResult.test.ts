import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Webhook } from "standardwebhooks"
import { AgentId } from "../../src/Domain/Ids.ts"
import type { ResultApprovalInput } from "../../src/Teams/Api.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import { awaitRun, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// A team whose final result a person approves before the room's webhook is
// sent (the team's `resultApproval`, docs/approvals.md#a-teams-result),
// through the real service: the room's webhook at a receiver on loopback,
// its signatures checked.

const setUp = (resultApproval: ResultApprovalInput) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const receiver = yield* FakeReceiver.make
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account, ["teams", "approvals"])
    const agent = yield* TestServer.createAgent(account, { name: "Writer", model: "local" })
    const teams = (yield* TestServer.apiClient(account.token)).teams
    const team = yield* teams.create({
      payload: {
        name: "Reviewed",
        members: [{ agentId: AgentId.make(agent.id), role: "writes" }],
        room: { outputWebhookUrl: receiver.url("/hook") },
        resultApproval
      }
    })
    assert.deepInclude(team.resultApproval, resultApproval)
    const verifier = new Webhook(team.room.signingSecret ?? "")
    const auth = { headers: TestServer.bearer(key) }
    const runId = yield* startRun(key, team.id, "Write one line about the sea")
    /** The room's events so far, verified, in the order they arrived. */
    const events = () =>
      receiver.requests.map((request) => verifier.verify(request.body, request.headers) as { type: string; data: any })
    const pending = eventually(
      Effect.map(client.request("GET", `/api/v1/approvals?status=pending&runId=${runId}`, auth), (response) => {
        assert.strictEqual(response.status, 200, response.text)
        assert.strictEqual(response.body.data.length, 1, response.text)
        return response.body.data[0]
      }),
      { timeoutMs: 30_000 }
    )
    const status = Effect.map(
      client.request("GET", `/api/v1/teams/${team.id}/runs/${runId}`, auth),
      (response) => response.body.data.status as string
    )
    const decide = (id: string, body: Record<string, unknown>) =>
      client.request("POST", `/api/v1/approvals/${id}/decision`, { ...auth, body })
    /**
     * The room's events once they are `types` (each delivery is on its own,
     * so in any order), within a bound.
     */
    const eventsAre = (types: ReadonlyArray<string>) =>
      eventually(
        Effect.sync(() => {
          const got = events()
          assert.deepStrictEqual(got.map((event) => event.type).sort(), [...types].sort())
          return got
        }),
        { timeoutMs: 30_000 }
      )
    const ofType = (events: ReadonlyArray<{ type: string; data: any }>, type: string) =>
      events.filter((event) => event.type === type).map((event) => event.data)
    return { account, team, runId, pending, status, decide, events, eventsAre, ofType }
  })

/** The result's approval, waiting: the run `waiting`, the room told of the approval and of nothing else. */
const waitingOn = (run: Effect.Success<ReturnType<typeof setUp>>) =>
  Effect.gen(function* () {
    const approval = yield* run.pending
    assert.deepInclude(approval, {
      kind: "result",
      runKind: "team_run",
      runId: run.runId,
      tool: "result",
      toolId: null,
      step: null,
      turn: null,
      status: "pending"
    })
    assert.isString(approval.arguments.result)
    assert.isAbove(approval.arguments.result.length, 0)
    yield* eventually(
      Effect.map(run.status, (status) => assert.strictEqual(status, "waiting")),
      { timeoutMs: 30_000 }
    )
    const requested = yield* run.eventsAre(["approval.requested"])
    assert.strictEqual(requested[0]!.data.id, approval.id)
    return approval as { id: string; arguments: { result: string } }
  })

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })(
  "a team's result approved by a person",
  (it) => {
    describe("resultApproval required", () => {
      it.effect("approved: the run completes with its result and the room's webhook is sent once", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const run = yield* setUp({ required: true })
            const approval = yield* waitingOn(run)
            const decided = yield* run.decide(approval.id, { decision: "approve", note: "fine" })
            assert.strictEqual(decided.status, 200, decided.text)
            const done = yield* awaitRun(run.account, run.team.id, run.runId)
            assert.strictEqual(done.status, "completed", JSON.stringify(done))
            assert.strictEqual(done.result, approval.arguments.result)
            assert.strictEqual(done.stopReason, "done")
            const events = yield* run.eventsAre(["approval.requested", "approval.decided", "team.run.completed"])
            const [completed] = run.ofType(events, "team.run.completed")
            assert.strictEqual(completed.result, approval.arguments.result)
            assert.strictEqual(completed.status, "completed")
            // Nothing more arrives: the result's webhook once.
            yield* quietWindow(1_000)
            assert.strictEqual(run.events().length, 3)
          })
        )
      )

      it.effect("approved with an edited result: the run completes with it, and so does its webhook", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const run = yield* setUp({ required: true, timeoutMs: 600_000, onExpiry: "approve" })
            const approval = yield* waitingOn(run)
            // Only `{ result }` may be sent for a result.
            const wrong = yield* run.decide(approval.id, { decision: "approve", arguments: { text: "x" } })
            assert.strictEqual(wrong.status, 400, wrong.text)
            assert.deepStrictEqual(wrong.body.errors[0].path, ["payload", "arguments", "text"])
            const empty = yield* run.decide(approval.id, { decision: "approve", arguments: { result: " " } })
            assert.strictEqual(empty.status, 400, empty.text)
            assert.deepStrictEqual(empty.body.errors[0].path, ["payload", "arguments", "result"])
            const decided = yield* run.decide(approval.id, {
              decision: "approve",
              arguments: { result: "The sea, edited by a person." }
            })
            assert.strictEqual(decided.status, 200, decided.text)
            assert.deepStrictEqual(decided.body.editedArguments, { result: "The sea, edited by a person." })
            const done = yield* awaitRun(run.account, run.team.id, run.runId)
            assert.strictEqual(done.status, "completed", JSON.stringify(done))
            assert.strictEqual(done.result, "The sea, edited by a person.")
            const events = yield* run.eventsAre(["approval.requested", "approval.decided", "team.run.completed"])
            const [completed] = run.ofType(events, "team.run.completed")
            assert.strictEqual(completed.result, "The sea, edited by a person.")
          })
        )
      )

      it.effect("rejected: the run fails naming the rejection and the note, and its webhook says so", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const run = yield* setUp({ required: true })
            const approval = yield* waitingOn(run)
            const decided = yield* run.decide(approval.id, { decision: "reject", note: "too vague" })
            assert.strictEqual(decided.status, 200, decided.text)
            const done = yield* awaitRun(run.account, run.team.id, run.runId)
            assert.strictEqual(done.status, "failed", JSON.stringify(done))
            assert.strictEqual(done.result, null)
            assert.include(done.error ?? "", "The result was rejected by key:")
            assert.include(done.error ?? "", "too vague")
            const events = yield* run.eventsAre(["approval.requested", "approval.decided", "team.run.failed"])
            const [failed] = run.ofType(events, "team.run.failed")
            assert.strictEqual(failed.status, "failed")
            assert.include(failed.error, "too vague")
          })
        )
      )

      it.effect("expired: onExpiry decides, reject (failed) or approve (completed as it was)", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const rejecting = yield* setUp({ required: true, timeoutMs: 1_000 })
            const approving = yield* setUp({ required: true, timeoutMs: 1_000, onExpiry: "approve" })
            const rejected = yield* awaitRun(rejecting.account, rejecting.team.id, rejecting.runId)
            assert.strictEqual(rejected.status, "failed", JSON.stringify(rejected))
            assert.include(rejected.error ?? "", "The result was not approved before its approval expired")
            const approved = yield* awaitRun(approving.account, approving.team.id, approving.runId)
            assert.strictEqual(approved.status, "completed", JSON.stringify(approved))
            assert.isString(approved.result)
            const rejectedEvents = yield* rejecting.eventsAre([
              "approval.requested",
              "approval.expired",
              "team.run.failed"
            ])
            assert.strictEqual(rejecting.ofType(rejectedEvents, "approval.expired")[0].status, "expired")
            const approvedEvents = yield* approving.eventsAre([
              "approval.requested",
              "approval.expired",
              "team.run.completed"
            ])
            const [expired] = approving.ofType(approvedEvents, "approval.expired")
            assert.deepInclude(expired, { status: "approved", decidedBy: "expiry" })
            assert.strictEqual(
              approving.ofType(approvedEvents, "team.run.completed")[0].result,
              expired.arguments.result
            )
          })
        )
      )
    })

    it.effect("cancelled while its result waits: the approval is cancelled, the room told of the cancel", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const run = yield* setUp({ required: true })
          const approval = yield* waitingOn(run)
          const teams = (yield* TestServer.apiClient(run.account.token)).teams
          const cancelled = yield* teams.cancel({ params: { id: run.team.id, runId: run.runId } })
          assert.strictEqual(cancelled.status, "cancelled")
          const client = yield* TestClient
          const read = yield* client.request("GET", `/api/approvals/${approval.id}`, {
            headers: TestServer.bearer(run.account.token)
          })
          assert.deepInclude(read.body, { status: "cancelled", decidedBy: "run" })
          const late = yield* run.decide(approval.id, { decision: "approve" })
          assert.strictEqual(late.status, 409, late.text)
          yield* run.eventsAre(["approval.requested", "team.run.cancelled"])
        })
      )
    )

    it.effect("a team that does not require it completes at once, and shows it not required", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const run = yield* setUp({ required: false })
          const done = yield* awaitRun(run.account, run.team.id, run.runId)
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          yield* run.eventsAre(["team.run.completed"])
          const teams = (yield* TestServer.apiClient(run.account.token)).teams
          const read = yield* teams.get({ params: { id: run.team.id } })
          assert.deepStrictEqual(read.resultApproval, { required: false, timeoutMs: 86_400_000, onExpiry: "reject" })
        })
      )
    )
  }
)
