import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FakeMcpServer from "../support/FakeMcpServer.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// An mcp tool in a team member's turn (docs/mcp.md), on the built-in local
// model (its tool rule: docs/tools.md; the mission carries the `call NAME
// {...}` phrase, which only a member offered the tool acts on), calling a
// server tool of a fake MCP server built with the official SDK on loopback.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const mission = 'Echo the order: call shop__echo {"text": "A-1"}'

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })("mcp tools", (it) => {
  describe("in a team run", () => {
    it.effect(
      "a member calls a server tool: the call and its result on its turn, sent with the run's idempotency key",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const mcp = yield* FakeMcpServer.make
            const client = yield* TestClient
            const account = yield* TestServer.signUp()
            const { key } = yield* TestServer.createKey(account, ["teams"])
            const tool = yield* client.request("POST", "/api/tools", {
              ...session(account),
              body: {
                name: "shop",
                description: "The shop's MCP server.",
                parameters: { type: "object" },
                settings: { kind: "mcp", url: mcp.url, allowedHosts: ["127.0.0.1"] }
              }
            })
            assert.strictEqual(tool.status, 201, tool.text)
            const a = yield* TestServer.createAgent(account, { name: "A", model: "local", toolIds: [tool.body.id] })
            const b = yield* TestServer.createAgent(account, { name: "B", model: "local" })
            const team = yield* createTeam(account, {
              members: [
                { agentId: a.id, role: "asks the shop" },
                { agentId: b.id, role: "sums up" }
              ]
            })

            const runId = yield* startRun(key, team.id, mission)
            const run = yield* awaitRun(account, team.id, runId)
            assert.strictEqual(run.status, "completed", JSON.stringify(run))

            // One tools/call, with the turn's scope in its key.
            const sent = mcp.received.filter((one) => one.method === "tools/call")
            assert.strictEqual(sent.length, 1)
            assert.strictEqual(sent[0]!.headers["idempotency-key"], `${runId}:turn-0:local_call_1`)

            // A answers from the result; B, without tools, calls nothing.
            const [first, second] = run.transcript.data
            assert.strictEqual(first!.agentId, a.id)
            assert.include(first!.content, 'shop__echo answered: "echo: A-1"')
            const calls = first!.toolCalls ?? []
            assert.strictEqual(calls.length, 1)
            assert.strictEqual(calls[0]!.callId, "local_call_1")
            assert.strictEqual(calls[0]!.tool, "shop__echo")
            assert.deepStrictEqual(calls[0]!.arguments, { text: "A-1" })
            assert.strictEqual(calls[0]!.status, "succeeded")
            assert.strictEqual(calls[0]!.result, "echo: A-1")
            assert.strictEqual(calls[0]!.scope, "turn-0")
            assert.strictEqual(second!.agentId, b.id)
            assert.strictEqual((second!.toolCalls ?? []).length, 0)
          })
        )
    )
  })
})
