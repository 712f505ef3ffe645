import { assert, describe, layer } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// The tool loop in a team member's turn, on the built-in local model (its tool
// rule: docs/tools.md; the mission carries the `call NAME {...}` phrase, which
// only a member offered the tool acts on), calling an http tool on a loopback
// receiver.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

/** A team of two local agents in round robin: A has the lookup tool when `withTool`, B never has tools. */
const setUp = (receiverUrl: string, withTool: boolean) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account, ["teams"])
    const tool = yield* client.request("POST", "/api/tools", { ...session(account), body: lookupTool(receiverUrl) })
    assert.strictEqual(tool.status, 201, tool.text)
    const a = yield* TestServer.createAgent(account, {
      name: "A",
      model: "local",
      ...(withTool ? { toolIds: [tool.body.id] } : {})
    })
    const b = yield* TestServer.createAgent(account, { name: "B", model: "local" })
    const team = yield* createTeam(account, {
      members: [
        { agentId: a.id, role: "looks things up" },
        { agentId: b.id, role: "sums up" }
      ]
    })
    return { account, key, team, a, b }
  })

/** The run's events, as the stream of a finished run gives them (the stream ends at the final one). */
const eventsOf = (account: Account, teamId: string, runId: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const stream = yield* client.request("GET", `/api/teams/${teamId}/runs/${runId}/events`, session(account))
    assert.strictEqual(stream.status, 200, stream.text)
    return stream.text
      .trim()
      .split("\n\n")
      .map((frame) => ({
        type: /^event: (.*)$/m.exec(frame)?.[1],
        data: JSON.parse(/^data: (.*)$/m.exec(frame)![1]!)
      }))
  })

/** The run as the key route answers it, as raw JSON: what a field left out looks like on the wire. */
const rawRun = (key: string, teamId: string, runId: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const run = yield* client.request("GET", `/api/v1/teams/${teamId}/runs/${runId}`, {
      headers: TestServer.bearer(key)
    })
    assert.strictEqual(run.status, 200, run.text)
    return run.body.data
  })

const mission = 'Find the order: call lookup_order {"id": "A-1"}'

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })("the tool loop", (it) => {
  describe("in a team run", () => {
    it.effect(
      "a member calls the tool: one request with the run's idempotency key, the call on its turn and on the stream",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
            const { account, key, team, a, b } = yield* setUp(receiver.url("/orders/{{args.id}}"), true)
            const runId = yield* startRun(key, team.id, mission)
            const run = yield* awaitRun(account, team.id, runId)
            assert.strictEqual(run.status, "completed", JSON.stringify(run))
            assert.strictEqual(run.stopReason, "done")

            assert.strictEqual(receiver.requests.length, 1)
            const [request] = receiver.requests
            assert.strictEqual(request!.method, "GET")
            assert.strictEqual(request!.path, "/orders/A-1")
            assert.strictEqual(request!.headers["idempotency-key"], `${runId}:turn-0:local_call_1`)

            // A answers from the result; B, without tools, speaks as ever and ends the run.
            const [first, second] = run.transcript.data
            assert.strictEqual(first!.agentId, a.id)
            assert.include(first!.content, "lookup_order answered:")
            assert.include(first!.content, "shipped")
            assert.strictEqual(second!.agentId, b.id)
            assert.include(second!.content, "B here:")
            assert.include(second!.content, "FINAL ANSWER:")
            assert.strictEqual(run.result, `Every member has spoken on "${mission}".`)
            assert.strictEqual(
              run.tokensUsed,
              run.transcript.data.reduce((n, e) => n + e.tokens, 0)
            )

            const calls = first!.toolCalls ?? []
            assert.strictEqual(calls.length, 1)
            const [call] = calls
            assert.strictEqual(call!.callId, "local_call_1")
            assert.strictEqual(call!.tool, "lookup_order")
            assert.deepStrictEqual(call!.arguments, { id: "A-1" })
            assert.strictEqual(call!.status, "succeeded")
            assert.include(call!.result ?? "", "shipped")
            assert.strictEqual(call!.attempts, 1)
            assert.strictEqual(call!.scope, "turn-0")

            // Only the turn that made calls carries them, on both routes.
            const raw = yield* rawRun(key, team.id, runId)
            assert.strictEqual(raw.transcript.data[0].toolCalls.length, 1)
            assert.isFalse("toolCalls" in raw.transcript.data[1])
            const client = yield* TestClient
            const page = yield* client.request("GET", `/api/v1/teams/${team.id}/runs/${runId}/transcript`, {
              headers: TestServer.bearer(key)
            })
            assert.strictEqual(page.status, 200, page.text)
            assert.strictEqual(page.body.data.data[0].toolCalls[0].callId, "local_call_1")
            assert.isFalse("toolCalls" in page.body.data.data[1])

            const events = yield* eventsOf(account, team.id, runId)
            assert.deepStrictEqual(
              events.map((e) => e.type),
              [
                "run.running",
                "turn.started",
                "tool.called",
                "tool.succeeded",
                "turn.completed",
                "turn.started",
                "turn.completed",
                "run.completed"
              ]
            )
            const called = events[2]!.data
            assert.strictEqual(called.turn, 0)
            assert.strictEqual(called.index, 0)
            assert.strictEqual(called.callId, "local_call_1")
            assert.strictEqual(called.tool, "lookup_order")
            assert.deepStrictEqual(called.arguments, { id: "A-1" })
            const succeeded = events[3]!.data
            assert.strictEqual(succeeded.callId, "local_call_1")
            assert.include(succeeded.result, "shipped")
            assert.isNumber(succeeded.durationMs)

            // The typed client reads the stream with its tool events.
            const api = yield* TestServer.apiClient(account.token)
            const typed = yield* Stream.runCollect(yield* api.teams.events({ params: { id: team.id, runId } }))
            assert.deepStrictEqual(
              Array.from(typed, (event) => event.event),
              events.map((e) => e.type)
            )
            assert.strictEqual(Array.from(typed)[2]!.data.callId, "local_call_1")
          })
        )
    )

    it.effect("members without tools speak as before: no call, no toolCalls, no tool events", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          const { account, key, team } = yield* setUp(receiver.url("/orders/{{args.id}}"), false)
          const runId = yield* startRun(key, team.id, mission)
          const run = yield* awaitRun(account, team.id, runId)
          assert.strictEqual(run.status, "completed", JSON.stringify(run))
          assert.strictEqual(run.stopReason, "done")
          assert.strictEqual(run.result, `Every member has spoken on "${mission}".`)
          assert.strictEqual(receiver.requests.length, 0)
          assert.include(run.transcript.data[0]!.content, "A here:")
          const raw = yield* rawRun(key, team.id, runId)
          assert.deepStrictEqual(
            raw.transcript.data.map((entry: object) => Object.keys(entry).sort()),
            [0, 1].map(() => ["agentId", "content", "createdAt", "index", "role", "tokens"])
          )
          const events = yield* eventsOf(account, team.id, runId)
          assert.deepStrictEqual(
            events.map((e) => e.type),
            ["run.running", "turn.started", "turn.completed", "turn.started", "turn.completed", "run.completed"]
          )
        })
      )
    )

    it.effect("a cancel stops the call in flight and marks it cancelled", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          // Long enough to be cancelled during it.
          receiver.script({ delayMs: 60_000 })
          const { account, team } = yield* setUp(receiver.url("/orders/{{args.id}}"), true)
          const { key } = yield* TestServer.createKey(account, ["teams"])
          const runId = yield* startRun(key, team.id, mission)
          yield* eventually(
            Effect.suspend(() =>
              receiver.requests.length === 1 ? Effect.void : Effect.die(new Error("the tool was not called"))
            ),
            { timeoutMs: 15_000, intervalMs: 50 }
          )
          const api = yield* TestServer.apiClient(account.token)
          const cancelled = yield* api.teams.cancel({ params: { id: team.id, runId } })
          assert.strictEqual(cancelled.status, "cancelled")
          const sql = yield* SqlClient.SqlClient
          const calls = yield* sql<{ status: string; scope: string; error: string | null }>`
            SELECT status, scope, error FROM tool_calls WHERE run_id = ${runId}`
          assert.deepStrictEqual(calls, [{ status: "cancelled", scope: "turn-0", error: "Cancelled" }])
          // The turn was interrupted: the call never ends otherwise.
          const events = yield* eventsOf(account, team.id, runId)
          assert.deepStrictEqual(
            events.map((e) => e.type),
            ["run.running", "turn.started", "tool.called", "run.cancelled"]
          )
          assert.strictEqual(receiver.requests.length, 1)
        })
      )
    )
  })
})
