import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { countTokens } from "../../src/Models/Tokens.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// Chat runs the tool loop: on the built-in local model (its tool rule:
// docs/tools.md) and on the fake OpenAI-compatible server, calling an http
// tool on a loopback receiver.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

/** A tenant with an API key and an agent on `model`, given the lookup tool on `receiver` when there is one. */
const setUp = (options: {
  readonly receiver?: FakeReceiver.FakeReceiver
  readonly model?: string
  readonly memoryEnabled?: boolean
}) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account)
    const toolIds: Array<string> = []
    if (options.receiver !== undefined) {
      const tool = yield* client.request("POST", "/api/tools", {
        ...session(account),
        body: lookupTool(options.receiver.url("/orders/{{args.id}}"))
      })
      assert.strictEqual(tool.status, 201, tool.text)
      toolIds.push(tool.body.id)
    }
    const agent = yield* TestServer.createAgent(account, {
      model: options.model ?? "local",
      toolIds,
      memoryEnabled: options.memoryEnabled ?? true
    })
    const chat = (body: { message: string; conversationId?: string }, headers: Record<string, string> = {}) =>
      client.request("POST", `/api/v1/agents/${agent.id}/chat`, {
        headers: { ...TestServer.bearer(key), ...headers },
        body
      })
    const turns = (conversationId: string) =>
      client.request("GET", `/api/agents/${agent.id}/conversations/${conversationId}/messages`, session(account))
    const tokensUsed = Effect.map(
      client.request("GET", "/api/billing", session(account)),
      (billing) => billing.body.tokensUsedToday as number
    )
    return { account, agentId: agent.id, chat, turns, tokensUsed }
  })

interface Event {
  readonly event: string
  readonly data: any
}

/** The events of a text/event-stream body, in order. */
const eventsOf = (text: string): ReadonlyArray<Event> =>
  text
    .split("\n\n")
    .filter((block) => block.trim() !== "")
    .map((block) => {
      let event = "message"
      let data = ""
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice("event: ".length)
        else if (line.startsWith("data: ")) data += line.slice("data: ".length)
      }
      return { event, data: JSON.parse(data) }
    })

const order = JSON.stringify({ id: "A-1", status: "shipped" })

layer(TestServer.layerWithFakeOpenAi(openaiKey, { webhookAllowPrivate: true }), { excludeTestServices: true })(
  "chat with tools",
  (it) => {
    describe("on the local model", () => {
      it.effect(
        "with memory: the tool is called once, the reply answers from its result and names the call; the history keeps the message and the reply only",
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const receiver = yield* FakeReceiver.make
              receiver.script({ body: order })
              const { account, agentId, chat, turns } = yield* setUp({ receiver })
              const message = 'Where is my order? call lookup_order {"id": "A-1"}'
              const first = yield* chat({ message, conversationId: "c-1" })
              assert.strictEqual(first.status, 200, first.text)
              assert.include(first.body.reply, "lookup_order answered:")
              assert.include(first.body.reply, "shipped")
              assert.strictEqual(first.body.toolCalls.length, 1)
              const [call] = first.body.toolCalls
              assert.deepStrictEqual(Object.keys(call).sort(), [
                "callId",
                "durationMs",
                "result",
                "resultCut",
                "status",
                "tool"
              ])
              assert.strictEqual(call.callId, "local_call_1")
              assert.strictEqual(call.tool, "lookup_order")
              assert.strictEqual(call.status, "succeeded")
              assert.isTrue(Number.isInteger(call.durationMs) && call.durationMs >= 0)

              assert.strictEqual(receiver.requests.length, 1)
              const [request] = receiver.requests
              assert.strictEqual(request!.path, "/orders/A-1")
              // The turn's own run id: a fresh one per turn, the call's id after it.
              const idempotencyKey = request!.headers["idempotency-key"] ?? ""
              assert.match(idempotencyKey, /^[0-9a-f-]{36}:local_call_1$/)

              // The call's full record, runKind chat, under the turn's run id.
              const sql = yield* SqlClient.SqlClient
              const records = yield* sql<{
                runId: string
                runKind: string
                scope: string
                status: string
                result: string
              }>`SELECT run_id, run_kind, scope, status, result FROM tool_calls WHERE tenant_id = ${account.tenantId}`
              assert.strictEqual(records.length, 1)
              assert.deepInclude(records[0], {
                runId: idempotencyKey.split(":")[0],
                runKind: "chat",
                scope: `${agentId}/c-1`,
                status: "succeeded"
              })
              assert.include(records[0]!.result, "shipped")

              // The next turn is sent the message and the reply, not the call and its result: the local
              // model counts every message's text, calls and results included, as its input.
              const followUp = "Thanks, that helps."
              const second = yield* chat({ message: followUp, conversationId: "c-1" })
              assert.strictEqual(second.status, 200, second.text)
              assert.isUndefined(second.body.toolCalls)
              assert.strictEqual(receiver.requests.length, 1)
              const stored = yield* turns("c-1")
              assert.strictEqual(stored.status, 200, stored.text)
              assert.deepStrictEqual(
                stored.body.data.map((turn: any) => [turn.message, turn.reply]),
                [
                  [message, first.body.reply],
                  [followUp, second.body.reply]
                ]
              )
              assert.strictEqual(
                stored.body.data[1].inputTokens,
                countTokens(message) + countTokens(first.body.reply) + countTokens(followUp)
              )
              // The first turn's row counts both model calls of its loop, as its response does.
              assert.strictEqual(stored.body.data[0].tokens, first.body.tokens)
            })
          )
      )

      it.effect("an agent without tools answers as before: no toolCalls in the response", () =>
        Effect.gen(function* () {
          const { chat } = yield* setUp({})
          const response = yield* chat({ message: 'call lookup_order {"id": "A-1"}' })
          assert.strictEqual(response.status, 200, response.text)
          assert.deepStrictEqual(Object.keys(response.body), ["reply", "conversationId", "tokens", "model"])
          assert.notInclude(response.body.reply, "answered:")

          const streamed = yield* chat({ message: "Hello there" }, { accept: "text/event-stream" })
          assert.strictEqual(streamed.status, 200, streamed.text)
          const events = eventsOf(streamed.text)
          assert.deepStrictEqual([...new Set(events.map((event) => event.event))], ["delta", "done"])
          assert.deepStrictEqual(Object.keys(events.at(-1)!.data), ["reply", "conversationId", "tokens", "model"])
        })
      )

      it.effect("streamed: the tool events, then the reply's deltas, then done naming the call", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: order })
            const { chat } = yield* setUp({ receiver })
            const response = yield* chat(
              { message: 'Where is it? call lookup_order {"id": "A-1"}' },
              { accept: "text/event-stream" }
            )
            assert.strictEqual(response.status, 200, response.text)
            assert.strictEqual(response.headers.get("content-type"), "text/event-stream")
            const events = eventsOf(response.text)
            const names = events.map((event) => event.event)
            assert.deepStrictEqual(names.slice(0, 2), ["tool.called", "tool.succeeded"])
            assert.strictEqual(names.at(-1), "done")
            assert.isTrue(names.slice(2, -1).length > 0 && names.slice(2, -1).every((name) => name === "delta"))
            assert.deepStrictEqual(events[0]!.data, {
              callId: "local_call_1",
              tool: "lookup_order",
              arguments: { id: "A-1" },
              attempt: 1
            })
            assert.strictEqual(events[1]!.data.callId, "local_call_1")
            assert.strictEqual(events[1]!.data.tool, "lookup_order")
            assert.include(events[1]!.data.result, "shipped")
            const done = events.at(-1)!.data
            const deltas = events.filter((event) => event.event === "delta").map((event) => event.data.text)
            assert.strictEqual(deltas.join(""), done.reply)
            assert.include(done.reply, "lookup_order answered:")
            assert.deepStrictEqual(
              done.toolCalls.map((call: any) => [call.callId, call.tool, call.status]),
              [["local_call_1", "lookup_order", "succeeded"]]
            )
            assert.strictEqual(receiver.requests.length, 1)
          })
        )
      )

      it.effect("without memory, a tool error (the receiver answers 500) is told to the model, which answers", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ status: 500, body: JSON.stringify({ error: "database down" }), times: 2 })
            const { chat } = yield* setUp({ receiver, memoryEnabled: false })
            const response = yield* chat({ message: 'call lookup_order {"id": "A-1"}' })
            assert.strictEqual(response.status, 200, response.text)
            assert.include(response.body.reply, "lookup_order failed:")
            assert.strictEqual(response.body.toolCalls.length, 1)
            const [call] = response.body.toolCalls
            assert.strictEqual(call.status, "failed")
            assert.isString(call.error)
            assert.include(call.error, "500")
            assert.strictEqual(receiver.requests.length, 1)

            const streamed = yield* chat(
              { message: 'call lookup_order {"id": "A-2"}' },
              { accept: "text/event-stream" }
            )
            assert.strictEqual(streamed.status, 200, streamed.text)
            const events = eventsOf(streamed.text)
            assert.deepStrictEqual(
              events.slice(0, 2).map((event) => event.event),
              ["tool.called", "tool.failed"]
            )
            assert.include(events[1]!.data.error, "500")
            assert.strictEqual(events.at(-1)!.event, "done")
          })
        )
      )
    })

    describe("on an OpenAI-compatible provider", () => {
      it.effect(
        "the second request carries the assistant's tool_calls and the tool message; every model call's tokens are counted",
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const fake = yield* FakeOpenAi
              fake.reset()
              const receiver = yield* FakeReceiver.make
              receiver.script({ body: order })
              const { chat, tokensUsed, turns } = yield* setUp({ receiver, model: "openai/gpt-4o-mini" })
              fake.script(
                {
                  toolCalls: [{ id: "call_A", name: "lookup_order", arguments: { id: "A-1" } }],
                  usage: { input: 100, output: 20 }
                },
                { text: "Your order A-1 has shipped.", usage: { input: 150, output: 30 } }
              )
              const before = yield* tokensUsed
              const message = "Where is order A-1?"
              const response = yield* chat({ message, conversationId: "w-1" })
              assert.strictEqual(response.status, 200, response.text)
              assert.strictEqual(response.body.reply, "Your order A-1 has shipped.")
              assert.strictEqual(response.body.tokens, 300)
              assert.deepStrictEqual(
                response.body.toolCalls.map((call: any) => [call.callId, call.tool, call.status]),
                [["call_A", "lookup_order", "succeeded"]]
              )
              assert.strictEqual((yield* tokensUsed) - before, 300)
              assert.strictEqual(receiver.requests.length, 1)
              assert.strictEqual(receiver.requests[0]!.headers["idempotency-key"]?.endsWith(":call_A"), true)

              assert.strictEqual(fake.requests.length, 2)
              const [ask, answer] = fake.requests
              assert.deepStrictEqual(
                ask!.body.tools.map((tool: any) => tool.function.name),
                ["lookup_order"]
              )
              assert.deepStrictEqual(ask!.body.messages, [{ role: "user", content: message }])
              const messages = answer!.body.messages as ReadonlyArray<any>
              assert.strictEqual(messages.length, 3)
              assert.deepInclude(messages[0], { role: "user", content: message })
              assert.strictEqual(messages[1].role, "assistant")
              assert.deepStrictEqual(
                messages[1].tool_calls.map((call: any) => [call.id, call.type, call.function.name]),
                [["call_A", "function", "lookup_order"]]
              )
              assert.deepStrictEqual(JSON.parse(messages[1].tool_calls[0].function.arguments), { id: "A-1" })
              assert.strictEqual(messages[2].role, "tool")
              assert.strictEqual(messages[2].tool_call_id, "call_A")
              assert.include(messages[2].content, "shipped")

              const stored = yield* turns("w-1")
              assert.deepInclude(stored.body.data[0], {
                message,
                reply: "Your order A-1 has shipped.",
                inputTokens: 250,
                outputTokens: 50,
                tokens: 300
              })

              // The next turn is sent the message and the reply only.
              fake.script({ text: "You are welcome.", usage: { input: 40, output: 5 } })
              const next = yield* chat({ message: "Thanks!", conversationId: "w-1" })
              assert.strictEqual(next.status, 200, next.text)
              assert.isUndefined(next.body.toolCalls)
              assert.deepStrictEqual(
                fake.requests[2]!.body.messages.map((sent: any) => [sent.role, sent.content, sent.tool_calls]),
                [
                  ["user", message, undefined],
                  ["assistant", "Your order A-1 has shipped.", undefined],
                  ["user", "Thanks!", undefined]
                ]
              )
            })
          )
      )
    })
  }
)
