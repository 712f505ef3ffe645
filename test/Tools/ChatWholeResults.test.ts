import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { AgentId } from "../../src/Domain/Ids.ts"
import { NotFound } from "../../src/Domain/Problems.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// A chat turn's tool calls: named in the response with the turn's id and what
// the model saw (cut at the tool's maxOutputBytes), read whole by
// conversation, turn and call, and forgotten with the conversation. On the
// built-in local model (its tool rule: docs/tools.md), calling an http tool on
// a loopback receiver.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

// 3,000 bytes of JSON string: far past the tool's 1,024.
const long = `"${"é".repeat(1_500)}"`
const lookup = 'call lookup_order {"id": "A-1"}'

/** A tenant with an API key and a local agent given the lookup tool (cut at 1,024 bytes) on `receiver`. */
const setUp = (receiver: FakeReceiver.FakeReceiver, options: { readonly memoryEnabled?: boolean } = {}) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account)
    const tool = yield* client.request("POST", "/api/tools", {
      ...session(account),
      body: { ...lookupTool(receiver.url("/orders/{{args.id}}")), policy: { maxOutputBytes: 1_024 } }
    })
    assert.strictEqual(tool.status, 201, tool.text)
    const agent = yield* TestServer.createAgent(account, {
      model: "local",
      toolIds: [tool.body.id],
      memoryEnabled: options.memoryEnabled ?? true
    })
    const chat = (body: { message: string; conversationId?: string }, headers: Record<string, string> = {}) =>
      client.request("POST", `/api/v1/agents/${agent.id}/chat`, {
        headers: { ...TestServer.bearer(key), ...headers },
        body
      })
    const callPath = (conversationId: string, turnId: string, callId = "local_call_1", agentId = agent.id) =>
      `/api/agents/${agentId}/conversations/${encodeURIComponent(conversationId)}/turns/${turnId}/tool-calls/${callId}`
    const readCall = (conversationId: string, turnId: string, callId?: string) =>
      client.request("GET", callPath(conversationId, turnId, callId), session(account))
    const forget = (conversationId: string) =>
      client.request("DELETE", `/api/agents/${agent.id}/conversations/${encodeURIComponent(conversationId)}`, {
        ...session(account)
      })
    return { account, key, toolId: tool.body.id as string, agentId: agent.id, chat, callPath, readCall, forget }
  })

/** The `done` event of a text/event-stream body. */
const doneOf = (text: string) => {
  const block = text.split("\n\n").find((frame) => frame.startsWith("event: done"))
  assert.isDefined(block, text)
  return JSON.parse(/^data: (.*)$/m.exec(block!)![1]!)
}

/** The tenant's chat call records, by scope, as (run_id, scope, call_id). */
const chatRecords = (tenantId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<{ runId: string; scope: string; callId: string }>`
      SELECT run_id, scope, call_id FROM tool_calls WHERE tenant_id = ${tenantId} AND run_kind = 'chat'
      ORDER BY scope, run_id, call_id`
  })

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })(
  "a chat turn's tool calls read whole",
  (it) => {
    describe("the chat response", () => {
      it.effect(
        "names the turn and, per call, what the model saw and whether it was cut; the route gives it whole",
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const receiver = yield* FakeReceiver.make
              receiver.script({ body: long })
              const { account, agentId, callPath, chat, key, readCall } = yield* setUp(receiver)
              const response = yield* chat({ message: `Where is it? ${lookup}`, conversationId: "c-1" })
              assert.strictEqual(response.status, 200, response.text)
              const { toolCalls, turnId } = response.body
              assert.match(turnId, uuid)
              assert.strictEqual(toolCalls.length, 1)
              const [call] = toolCalls
              assert.deepStrictEqual(Object.keys(call).sort(), [
                "callId",
                "durationMs",
                "result",
                "resultCut",
                "status",
                "tool"
              ])
              assert.strictEqual(call.status, "succeeded")
              assert.strictEqual(call.resultCut, true)
              const [seen, marker] = (call.result as string).split("\n[cut: ")
              assert.isAtMost(Buffer.byteLength(seen!), 1_024)
              assert.match(marker!, /^the first \d+ of \d+ bytes\]$/)

              // Recorded under the turn's id, in the conversation's scope.
              const records = yield* chatRecords(account.tenantId)
              assert.deepStrictEqual(records, [{ runId: turnId, scope: `${agentId}/c-1`, callId: "local_call_1" }])
              assert.strictEqual(receiver.requests[0]!.headers["idempotency-key"], `${turnId}:local_call_1`)

              const one = yield* readCall("c-1", turnId)
              assert.strictEqual(one.status, 200, one.text)
              assert.deepInclude(one.body, {
                callId: "local_call_1",
                tool: "lookup_order",
                arguments: { id: "A-1" },
                status: "succeeded",
                result: call.result,
                resultCut: true,
                error: null,
                turn: 0
              })
              assert.include(one.body.fullResult, long.slice(1, -1))
              assert.isAbove(Buffer.byteLength(one.body.fullResult), 3_000)
              assert.isTrue((one.body.fullResult as string).startsWith(seen!))

              // The typed client decodes it.
              const api = yield* TestServer.apiClient(account.token)
              const typed = yield* api.agents.toolCall({
                params: { id: AgentId.make(agentId), conversationId: "c-1", turnId, callId: "local_call_1" }
              })
              assert.strictEqual(typed.fullResult, one.body.fullResult)

              // The client that chatted reads it with its API key, under /api/v1.
              const client = yield* TestClient
              const withKey = yield* client.request("GET", `/api/v1${callPath("c-1", turnId).slice("/api".length)}`, {
                headers: TestServer.bearer(key)
              })
              assert.strictEqual(withKey.status, 200, withKey.text)
              assert.strictEqual(withKey.body.fullResult, one.body.fullResult)

              // A turn without calls has neither turnId nor toolCalls; the next with calls, a turn id of its own.
              const plain = yield* chat({ message: "Thanks.", conversationId: "c-1" })
              assert.strictEqual(plain.status, 200, plain.text)
              assert.isFalse("turnId" in plain.body)
              assert.isFalse("toolCalls" in plain.body)
              receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
              const again = yield* chat({ message: `Once more: ${lookup}`, conversationId: "c-1" })
              assert.strictEqual(again.status, 200, again.text)
              assert.match(again.body.turnId, uuid)
              assert.notStrictEqual(again.body.turnId, turnId)
              // Its call is numbered in its own loop, and read under its own turn.
              const [short] = again.body.toolCalls
              assert.strictEqual(short.resultCut, false)
              assert.include(short.result, "shipped")
              const shortWhole = yield* readCall("c-1", again.body.turnId, short.callId)
              assert.strictEqual(shortWhole.status, 200, shortWhole.text)
              assert.strictEqual(shortWhole.body.fullResult, short.result)
            })
          )
      )

      it.effect("streamed: the done event carries the turn id and each call's result and cut", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: long })
            const { chat, readCall } = yield* setUp(receiver)
            const response = yield* chat(
              { message: `Where is it? ${lookup}`, conversationId: "s-1" },
              { accept: "text/event-stream" }
            )
            assert.strictEqual(response.status, 200, response.text)
            const done = doneOf(response.text)
            assert.match(done.turnId, uuid)
            assert.strictEqual(done.toolCalls.length, 1)
            assert.strictEqual(done.toolCalls[0].resultCut, true)
            assert.include(done.toolCalls[0].result, "\n[cut: ")
            const one = yield* readCall("s-1", done.turnId)
            assert.strictEqual(one.status, 200, one.text)
            assert.strictEqual(one.body.result, done.toolCalls[0].result)
            assert.isAbove(Buffer.byteLength(one.body.fullResult), 3_000)
          })
        )
      )

      it.effect("a failed call: no result, not cut; the route gives its error and a null fullResult", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ status: 500, body: JSON.stringify({ error: "database down" }), times: 2 })
            const { chat, readCall } = yield* setUp(receiver)
            const response = yield* chat({ message: lookup, conversationId: "f-1" })
            assert.strictEqual(response.status, 200, response.text)
            const [call] = response.body.toolCalls
            assert.strictEqual(call.status, "failed")
            assert.isFalse("result" in call)
            assert.strictEqual(call.resultCut, false)
            assert.include(call.error, "500")
            const one = yield* readCall("f-1", response.body.turnId)
            assert.strictEqual(one.status, 200, one.text)
            assert.strictEqual(one.body.status, "failed")
            assert.isNull(one.body.fullResult)
            assert.strictEqual(one.body.error, call.error)
          })
        )
      )
    })

    describe("GET /api/agents/{id}/conversations/{conversationId}/turns/{turnId}/tool-calls/{callId}", () => {
      it.effect("404 for another call, turn, conversation or agent; another tenant gets 404", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: long, times: 2 })
            const { account, agentId, callPath, chat, toolId } = yield* setUp(receiver)
            const first = yield* chat({ message: lookup, conversationId: "c-1" })
            const second = yield* chat({ message: lookup, conversationId: "c-2" })
            assert.strictEqual(first.status, 200, first.text)
            assert.strictEqual(second.status, 200, second.text)
            const turnId = first.body.turnId as string
            const found = yield* client.request("GET", callPath("c-1", turnId), session(account))
            assert.strictEqual(found.status, 200, found.text)

            // Another agent of the tenant with the same tool.
            const sibling = yield* TestServer.createAgent(account, { model: "local", toolIds: [toolId] })
            for (const path of [
              callPath("c-1", turnId, "local_call_9"),
              callPath("c-1", crypto.randomUUID()),
              // The other conversation's turn, asked under this one; and this turn under the other.
              callPath("c-1", second.body.turnId),
              callPath("c-2", turnId),
              callPath("no-such", turnId),
              callPath("c-1", turnId, "local_call_1", sibling.id),
              callPath("c-1", turnId, "local_call_1", crypto.randomUUID())
            ]) {
              const reply = yield* client.request("GET", path, session(account))
              assert.strictEqual(reply.status, 404, `${path}: ${reply.text}`)
              assert.strictEqual(reply.headers.get("content-type"), "application/problem+json", path)
              assert.notInclude(reply.text, "é")
            }

            const other = yield* TestServer.signUp()
            const reply = yield* client.request("GET", callPath("c-1", turnId), session(other))
            assert.strictEqual(reply.status, 404, reply.text)
            assert.notInclude(reply.text, "lookup_order")
            assert.notInclude(reply.text, "é")
            const api = yield* TestServer.apiClient(other.token)
            const refused = yield* Effect.flip(
              api.agents.toolCall({
                params: { id: AgentId.make(agentId), conversationId: "c-1", turnId, callId: "local_call_1" }
              })
            )
            assert.instanceOf(refused, NotFound)
            // An API key does not reach the conversation routes.
            const otherKey = yield* TestServer.createKey(account)
            const keyed = yield* client.request("GET", callPath("c-1", turnId), {
              headers: TestServer.bearer(otherKey.key)
            })
            assert.strictEqual(keyed.status, 401, keyed.text)
            // Under /api/v1 a key reads its own tenant's calls only.
            const otherTenantKey = yield* TestServer.createKey(other)
            const v1 = yield* client.request("GET", `/api/v1${callPath("c-1", turnId).slice("/api".length)}`, {
              headers: TestServer.bearer(otherTenantKey.key)
            })
            assert.strictEqual(v1.status, 404, v1.text)
            assert.notInclude(v1.text, "é")
          })
        )
      )
    })

    describe("forgetting a conversation", () => {
      it.effect(
        "deletes its turns' calls, those of the agents they asked too, and no other conversation's or tenant's",
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const client = yield* TestClient
              const receiver = yield* FakeReceiver.make
              receiver.script({ body: long, times: 10 })
              const { account, agentId, chat, forget, readCall, toolId } = yield* setUp(receiver)
              // An agent tool: the asked agent makes its own call, under the asking turn's id.
              const expert = yield* TestServer.createAgent(account, {
                name: "Expert",
                model: "local",
                toolIds: [toolId]
              })
              const ask = yield* client.request("POST", "/api/tools", {
                ...session(account),
                body: {
                  name: "ask_expert",
                  description: "Asks the expert.",
                  parameters: {
                    type: "object",
                    properties: { message: { type: "string" } },
                    required: ["message"],
                    additionalProperties: false
                  },
                  settings: { kind: "agent", agentId: expert.id }
                }
              })
              assert.strictEqual(ask.status, 201, ask.text)
              const updated = yield* client.request("PUT", `/api/agents/${agentId}`, {
                ...session(account),
                body: { toolIds: [toolId, ask.body.id] }
              })
              assert.strictEqual(updated.status, 200, updated.text)

              const first = yield* chat({ message: lookup, conversationId: "c-1" })
              const asked = yield* chat({
                message: `call ask_expert ${JSON.stringify({ message: lookup })}`,
                conversationId: "c-1"
              })
              const kept = yield* chat({ message: lookup, conversationId: "c-2" })
              for (const response of [first, asked, kept]) assert.strictEqual(response.status, 200, response.text)
              assert.deepStrictEqual(
                asked.body.toolCalls.map((call: any) => [call.tool, call.status]),
                [["ask_expert", "succeeded"]]
              )
              const before = yield* chatRecords(account.tenantId)
              // c-1: its two turns' calls and the expert's; c-2: one.
              assert.strictEqual(before.length, 4, JSON.stringify(before))
              const nested = before.filter((record) => record.runId === asked.body.turnId)
              assert.strictEqual(nested.length, 2, JSON.stringify(before))
              assert.isTrue(
                nested.some((record) => record.scope.startsWith(`${agentId}/c-1/`)),
                JSON.stringify(nested)
              )

              // Another tenant cannot forget it, nor its calls.
              const other = yield* TestServer.signUp()
              const foreign = yield* client.request(
                "DELETE",
                `/api/agents/${agentId}/conversations/c-1`,
                session(other)
              )
              assert.strictEqual(foreign.status, 404, foreign.text)
              assert.strictEqual((yield* chatRecords(account.tenantId)).length, 4)

              const forgotten = yield* forget("c-1")
              assert.strictEqual(forgotten.status, 204, forgotten.text)
              const after = yield* chatRecords(account.tenantId)
              assert.deepStrictEqual(after, [
                { runId: kept.body.turnId, scope: `${agentId}/c-2`, callId: "local_call_1" }
              ])
              const gone = yield* readCall("c-1", first.body.turnId)
              assert.strictEqual(gone.status, 404, gone.text)
              const stillThere = yield* readCall("c-2", kept.body.turnId)
              assert.strictEqual(stillThere.status, 200, stillThere.text)
              // Forgotten once, there is nothing left to forget.
              assert.strictEqual((yield* forget("c-1")).status, 404)
            })
          )
      )

      it.effect("of an agent without memory: no turns are kept, but its calls are, and go", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: long })
            const { account, chat, forget, readCall } = yield* setUp(receiver, { memoryEnabled: false })
            const response = yield* chat({ message: lookup, conversationId: "m-1" })
            assert.strictEqual(response.status, 200, response.text)
            const one = yield* readCall("m-1", response.body.turnId)
            assert.strictEqual(one.status, 200, one.text)
            const forgotten = yield* forget("m-1")
            assert.strictEqual(forgotten.status, 204, forgotten.text)
            assert.deepStrictEqual(yield* chatRecords(account.tenantId), [])
            assert.strictEqual((yield* readCall("m-1", response.body.turnId)).status, 404)
            assert.strictEqual((yield* forget("m-1")).status, 404)
          })
        )
      )
    })
  }
)
