import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { TeamId } from "../../src/Domain/Ids.ts"
import { NotFound } from "../../src/Domain/Problems.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// The whole result of a team turn's tool call, of which the model saw a cut
// (the tool's maxOutputBytes): read by run, turn and call on the team routes,
// on the built-in local model (its tool rule: docs/tools.md) calling an http
// tool on a loopback receiver.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const mission = 'Find the order: call lookup_order {"id": "A-1"}'
// 3,000 bytes of JSON string: far past the tool's 1,024.
const long = `"${"é".repeat(1_500)}"`

/** A tenant with a key, a team of A (given the lookup tool, cut at 1,024 bytes) and B, and a finished run of it. */
const finishedRun = (receiver: FakeReceiver.FakeReceiver) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account, ["teams"])
    const tool = yield* client.request("POST", "/api/tools", {
      ...session(account),
      body: { ...lookupTool(receiver.url("/orders/{{args.id}}")), policy: { maxOutputBytes: 1_024 } }
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
    const runId = yield* startRun(key, team.id, mission)
    const run = yield* awaitRun(account, team.id, runId)
    assert.strictEqual(run.status, "completed", JSON.stringify(run))
    return { account, key, team, runId, run, a, b }
  })

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })(
  "a team turn's tool call read whole",
  (it) => {
    describe("GET /teams/{id}/runs/{runId}/turns/{turn}/tool-calls/{callId}", () => {
      it.effect("gives the call as the transcript shows it, with the whole result, on the session and key routes", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: long })
            const { account, key, team, runId, run } = yield* finishedRun(receiver)
            assert.strictEqual(receiver.requests.length, 1)

            // The transcript shows the cut.
            const listed = run.transcript.data[0]!.toolCalls ?? []
            assert.strictEqual(listed.length, 1)
            const [call] = listed
            assert.strictEqual(call!.resultCut, true)
            const [seen, marker] = (call!.result ?? "").split("\n[cut: ")
            assert.isAtMost(Buffer.byteLength(seen!), 1_024)
            assert.match(marker!, /^the first \d+ of \d+ bytes\]$/)

            const path = `/teams/${team.id}/runs/${runId}/turns/0/tool-calls/local_call_1`
            const one = yield* client.request("GET", `/api${path}`, session(account))
            assert.strictEqual(one.status, 200, one.text)
            assert.deepInclude(one.body, {
              callId: "local_call_1",
              tool: "lookup_order",
              arguments: { id: "A-1" },
              status: "succeeded",
              result: call!.result,
              resultCut: true,
              error: null,
              attempts: 1,
              scope: "turn-0",
              turn: 0
            })
            // The whole tool output (the http tool's status, type and body), of which the model saw the start.
            assert.include(one.body.fullResult, long.slice(1, -1))
            assert.isAbove(Buffer.byteLength(one.body.fullResult), 3_000)
            assert.isTrue((one.body.fullResult as string).startsWith(seen!))

            // The key routes answer the same call in their envelope.
            const v1 = yield* client.request("GET", `/api/v1${path}`, { headers: TestServer.bearer(key) })
            assert.strictEqual(v1.status, 200, v1.text)
            assert.strictEqual(v1.body.success, true)
            assert.deepStrictEqual(v1.body.data, one.body)
            const pub = yield* client.request("GET", `/api/public${path}`, { headers: { "x-api-key": key } })
            assert.strictEqual(pub.status, 200, pub.text)
            assert.deepStrictEqual(pub.body.data, one.body)

            // The typed client decodes it.
            const api = yield* TestServer.apiClient(account.token)
            const typed = yield* api.teams.toolCall({
              params: { id: TeamId.make(team.id), runId, turn: "0", callId: "local_call_1" }
            })
            assert.strictEqual(typed.fullResult, one.body.fullResult)
            assert.strictEqual(typed.startedAt instanceof Date, true)
          })
        )
      )

      it.effect("a result that was not cut is its own whole result", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const short = JSON.stringify({ id: "A-1", status: "shipped" })
            receiver.script({ body: short })
            const { account, team, runId } = yield* finishedRun(receiver)
            const one = yield* client.request(
              "GET",
              `/api/teams/${team.id}/runs/${runId}/turns/0/tool-calls/local_call_1`,
              session(account)
            )
            assert.strictEqual(one.status, 200, one.text)
            assert.strictEqual(one.body.resultCut, false)
            assert.include(one.body.result, "shipped")
            assert.strictEqual(one.body.fullResult, one.body.result)
          })
        )
      )

      it.effect("a failed call has no whole result: fullResult null, the error as the model saw it", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            receiver.script({ status: 500, body: JSON.stringify({ error: "database down" }), times: 2 })
            const { account, team, runId } = yield* finishedRun(receiver)
            const one = yield* client.request(
              "GET",
              `/api/teams/${team.id}/runs/${runId}/turns/0/tool-calls/local_call_1`,
              session(account)
            )
            assert.strictEqual(one.status, 200, one.text)
            assert.strictEqual(one.body.status, "failed")
            assert.isNull(one.body.fullResult)
            assert.isNull(one.body.result)
            assert.include(one.body.error, "500")
          })
        )
      )

      it.effect("404 for a call, turn, run or team that does not hold it; another tenant gets 404 on every route", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: long })
            const { account, key, team, runId, a, b } = yield* finishedRun(receiver)
            const base = `/api/teams/${team.id}/runs/${runId}`
            const found = yield* client.request("GET", `${base}/turns/0/tool-calls/local_call_1`, session(account))
            assert.strictEqual(found.status, 200, found.text)

            // Another team of the same tenant: the run is not its.
            const otherTeam = yield* createTeam(account, {
              members: [
                { agentId: a.id, role: "r" },
                { agentId: b.id, role: "r" }
              ]
            })
            const missing = [
              // No such call in the turn.
              `${base}/turns/0/tool-calls/local_call_9`,
              // B's turn made no call; there is no turn 7; a turn is its transcript index.
              `${base}/turns/1/tool-calls/local_call_1`,
              `${base}/turns/7/tool-calls/local_call_1`,
              `${base}/turns/x/tool-calls/local_call_1`,
              `${base}/turns/00/tool-calls/local_call_1`,
              `${base}/turns/-0/tool-calls/local_call_1`,
              // No such run; a run of another team.
              `/api/teams/${team.id}/runs/${crypto.randomUUID()}/turns/0/tool-calls/local_call_1`,
              `/api/teams/${otherTeam.id}/runs/${runId}/turns/0/tool-calls/local_call_1`
            ]
            for (const path of missing) {
              const reply = yield* client.request("GET", path, session(account))
              assert.strictEqual(reply.status, 404, `${path}: ${reply.text}`)
              assert.strictEqual(reply.headers.get("content-type"), "application/problem+json", path)
              assert.notInclude(reply.text, "é")
              const keyed = yield* client.request("GET", path.replace(/^\/api/, "/api/v1"), {
                headers: TestServer.bearer(key)
              })
              assert.strictEqual(keyed.status, 404, `v1 ${path}: ${keyed.text}`)
            }

            // Another tenant, with a session or a key, sees nothing of it.
            const other = yield* TestServer.signUp()
            const otherKey = yield* TestServer.createKey(other, ["teams"])
            for (const [path, headers] of [
              [`${base}/turns/0/tool-calls/local_call_1`, session(other).headers],
              [
                `/api/v1/teams/${team.id}/runs/${runId}/turns/0/tool-calls/local_call_1`,
                TestServer.bearer(otherKey.key)
              ],
              [
                `/api/public/teams/${team.id}/runs/${runId}/turns/0/tool-calls/local_call_1`,
                { "x-api-key": otherKey.key }
              ]
            ] as const) {
              const reply = yield* client.request("GET", path, { headers })
              assert.strictEqual(reply.status, 404, `${path}: ${reply.text}`)
              assert.notInclude(reply.text, "lookup_order")
              assert.notInclude(reply.text, "é")
            }
            const api = yield* TestServer.apiClient(other.token)
            const refused = yield* Effect.flip(
              api.teams.toolCall({ params: { id: TeamId.make(team.id), runId, turn: "0", callId: "local_call_1" } })
            )
            assert.instanceOf(refused, NotFound)
          })
        )
      )
    })
  }
)
