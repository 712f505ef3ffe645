import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { anthropicKey, FakeAnthropic } from "../support/FakeAnthropic.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// Every bound of the tool loop ends it cleanly, with the model's answer
// (docs/tool-calls.md#bounds); and the loop speaks Anthropic's wire format
// as it does OpenAI's.

const withFakes = Layer.unwrap(
  Effect.gen(function* () {
    const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
    const anthropic = yield* FakeAnthropic.make({ apiKey: anthropicKey })
    return TestServer.layer({
      openaiBaseUrl: openai.url,
      openaiApiKey: Option.some(Redacted.make(openaiKey)),
      anthropicBaseUrl: anthropic.url,
      anthropicApiKey: Option.some(Redacted.make(anthropicKey)),
      modelTimeout: Duration.seconds(20),
      modelMaxRetries: 0,
      webhookAllowPrivate: true
    }).pipe(Layer.merge(Layer.succeed(FakeOpenAi, openai)), Layer.merge(Layer.succeed(FakeAnthropic, anthropic)))
  })
)

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

/** A tenant whose agent on `model` has the lookup tool (with `policy`) on `receiver`; its chat and its calls. */
const setUp = (receiver: FakeReceiver.FakeReceiver, model: string, policy: Record<string, number> = {}) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account)
    const tool = yield* client.request("POST", "/api/tools", {
      ...session(account),
      body: {
        ...lookupTool(receiver.url("/orders/{{args.id}}")),
        ...(model === "local"
          ? {
              // Called with no arguments, as a result asks (see callAgain).
              parameters: { type: "object", properties: { id: { type: "string" } } },
              settings: { ...lookupTool("").settings, url: receiver.url("/orders") }
            }
          : {}),
        policy
      }
    })
    assert.strictEqual(tool.status, 201, tool.text)
    const agent = yield* TestServer.createAgent(account, { model, toolIds: [tool.body.id], memoryEnabled: false })
    const chat = (message: string) =>
      client.request("POST", `/api/v1/agents/${agent.id}/chat`, { headers: TestServer.bearer(key), body: { message } })
    return { chat }
  })

// The local model calls again whatever a result asks it to (docs/tools.md): a receiver answering
// this (plain text, so that no JSON escaping hides it in the result) keeps the loop going until a
// bound stops it.
const callAgain = "call lookup_order"

layer(withFakes, { excludeTestServices: true })("the tool loop's bounds", (it) => {
  describe("on the local model", () => {
    it.effect("a tool's maxCallsPerRun: its further calls are refused with a tool error, and the model answers", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          receiver.script({ body: callAgain, times: 100 })
          const { chat } = yield* setUp(receiver, "local", { maxCallsPerRun: 3 })
          const reply = yield* chat("call lookup_order")
          assert.strictEqual(reply.status, 200, reply.text)
          assert.strictEqual(receiver.requests.length, 3)
          const calls = reply.body.toolCalls as Array<{ status: string; error?: string }>
          assert.deepStrictEqual(
            calls.map((call) => call.status),
            ["succeeded", "succeeded", "succeeded", "failed"]
          )
          assert.include(calls[3]!.error, "maxCallsPerRun")
          assert.include(reply.body.reply, "lookup_order failed")
        })
      )
    )

    it.effect("maxToolCallsPerTurn: after 8 calls the tools are withdrawn and the model answers", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          receiver.script({ body: callAgain, times: 100 })
          const { chat } = yield* setUp(receiver, "local", { maxCallsPerRun: 100 })
          const reply = yield* chat("call lookup_order")
          assert.strictEqual(reply.status, 200, reply.text)
          assert.strictEqual(receiver.requests.length, 8)
          assert.strictEqual(reply.body.toolCalls.length, 8)
          assert.include(reply.body.reply, "lookup_order answered")
        })
      )
    )
  })

  describe("on the fake OpenAI", () => {
    it.effect("three calls with invalid arguments: none reaches the target, then the model must answer", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          const receiver = yield* FakeReceiver.make
          const invalid = (id: string) => ({ toolCalls: [{ id, name: "lookup_order", arguments: { order: 1 } }] })
          fake.script(invalid("call_1"), invalid("call_2"), invalid("call_3"), { text: "I could not look it up." })
          const { chat } = yield* setUp(receiver, "openai/gpt-4o-mini")
          const reply = yield* chat("Where is my order?")
          assert.strictEqual(reply.status, 200, reply.text)
          assert.strictEqual(reply.body.reply, "I could not look it up.")
          assert.strictEqual(receiver.requests.length, 0)
          assert.strictEqual(fake.requests.length, 4)
          assert.deepStrictEqual(
            fake.requests.map((request) => request.body.tool_choice),
            ["auto", "auto", "auto", "none"]
          )
          // Each invalid call went back to the model as a tool message naming the problem.
          const told = fake.requests[1]!.body.messages.at(-1)
          assert.strictEqual(told.role, "tool")
          assert.strictEqual(told.tool_call_id, "call_1")
          assert.include(told.content, "id")
        })
      )
    )
  })

  describe("on the fake Anthropic", () => {
    it.effect(
      "two calls in one turn, streamed arguments, a tool error: the results go back as tool_result blocks",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const fake = yield* FakeAnthropic
            fake.reset()
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) }, { status: 500 })
            fake.script(
              {
                toolCalls: [
                  { id: "toolu_1", name: "lookup_order", arguments: { id: "A-1" } },
                  { id: "toolu_2", name: "lookup_order", arguments: { id: "B-2" } }
                ],
                argumentChunkChars: 2
              },
              { text: "A-1 shipped; B-2 is unknown." }
            )
            const { chat } = yield* setUp(receiver, "anthropic/claude-sonnet-4-5")
            const reply = yield* chat("Where are A-1 and B-2?")
            assert.strictEqual(reply.status, 200, reply.text)
            assert.strictEqual(reply.body.reply, "A-1 shipped; B-2 is unknown.")
            assert.deepStrictEqual(
              reply.body.toolCalls.map((call: { callId: string; status: string }) => [call.callId, call.status]),
              [
                ["toolu_1", "succeeded"],
                ["toolu_2", "failed"]
              ]
            )
            assert.strictEqual(receiver.requests.length, 2)
            const second = fake.requests[1]!.body
            assert.deepStrictEqual(
              second.messages.at(-2).content.map((block: { type: string; id?: string }) => [block.type, block.id]),
              [
                ["tool_use", "toolu_1"],
                ["tool_use", "toolu_2"]
              ]
            )
            const results = second.messages.at(-1)
            assert.strictEqual(results.role, "user")
            assert.deepStrictEqual(
              results.content.map((block: { tool_use_id: string; is_error?: boolean }) => [
                block.tool_use_id,
                block.is_error === true
              ]),
              [
                ["toolu_1", false],
                ["toolu_2", true]
              ]
            )
          })
        )
    )
  })
})
