import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import type { AppSettings } from "../../src/Config.ts"
import { countTokens } from "../../src/Models/Tokens.ts"
import { anthropicKey, FakeAnthropic } from "../support/FakeAnthropic.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const instructions = "You are Scout, a terse helper."

/** The service with both providers pointed at fakes on loopback. */
const withFakes = (settings: Partial<AppSettings> = {}) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
      const anthropic = yield* FakeAnthropic.make({ apiKey: anthropicKey })
      return TestServer.layer({
        openaiBaseUrl: openai.url,
        openaiApiKey: Option.some(Redacted.make(openaiKey)),
        anthropicBaseUrl: anthropic.url,
        anthropicApiKey: Option.some(Redacted.make(anthropicKey)),
        modelTimeout: Duration.millis(800),
        modelMaxRetries: 1,
        ...settings
      }).pipe(Layer.merge(Layer.succeed(FakeOpenAi, openai)), Layer.merge(Layer.succeed(FakeAnthropic, anthropic)))
    })
  )

const setUp = (model: string, agent: Record<string, unknown> = {}) =>
  Effect.gen(function* () {
    const account = yield* TestServer.signUp()
    const key = yield* TestServer.createKey(account, ["chat"])
    const created = yield* TestServer.createAgent(account, { model, instructions, ...agent })
    const chat = (body: unknown, headers: Record<string, string> = {}) =>
      Effect.flatMap(TestClient, (client) =>
        client.request("POST", `/api/v1/agents/${created.id}/chat`, {
          headers: { ...TestServer.bearer(key.key), ...headers },
          body
        })
      )
    return { account, agentId: created.id, chat }
  })

layer(withFakes(), { excludeTestServices: true })("chat through real provider protocols", (it) => {
  describe("OpenAI Chat Completions", () => {
    it.effect("sends the system prompt, the history and the new message; reports usage and the model", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { chat } = yield* setUp("openai/gpt-4o-mini")
        fake.script(
          { text: "Hello Ada.", usage: { input: 20, output: 3 }, model: "gpt-4o-mini-2024-07-18" },
          { text: "Your name is Ada.", usage: { input: 31, output: 5 }, model: "gpt-4o-mini-2024-07-18" }
        )
        const first = yield* chat({ message: "My name is Ada", conversationId: "h" })
        const second = yield* chat({ message: "What is my name?", conversationId: "h" })
        assert.deepStrictEqual(first.body, {
          reply: "Hello Ada.",
          conversationId: "h",
          tokens: 23,
          model: "openai/gpt-4o-mini-2024-07-18"
        })
        assert.strictEqual(second.body.tokens, 36)
        assert.strictEqual(fake.requests.length, 2)
        const sent = fake.requests[1]!
        assert.strictEqual(sent.path, "/v1/chat/completions")
        assert.strictEqual(sent.headers.authorization, `Bearer ${openaiKey}`)
        assert.strictEqual(sent.body.model, "gpt-4o-mini")
        assert.deepStrictEqual(sent.body.messages, [
          { role: "system", content: instructions },
          { role: "user", content: "My name is Ada" },
          { role: "assistant", content: "Hello Ada." },
          { role: "user", content: "What is my name?" }
        ])
      })
    )

    it.effect("without memory the message goes alone", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { chat } = yield* setUp("openai/gpt-4o-mini", { memoryEnabled: false })
        yield* chat({ message: "My name is Ada", conversationId: "m" })
        yield* chat({ message: "What is my name?", conversationId: "m" })
        assert.deepStrictEqual(fake.requests[1]!.body.messages, [
          { role: "system", content: instructions },
          { role: "user", content: "What is my name?" }
        ])
      })
    )

    it.effect("streams: deltas as events, usage in the final event, the turn stored", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { account, agentId, chat } = yield* setUp("openai/gpt-4o-mini")
        fake.script({ text: "One two three four", usage: { input: 9, output: 4 } })
        const response = yield* chat({ message: "Count", conversationId: "s" }, { accept: "text/event-stream" })
        const events = response.text
          .trim()
          .split("\n\n")
          .map((block) => ({
            event: block.split("\n")[0]!.slice(7),
            data: JSON.parse(block.split("\n")[1]!.slice(6))
          }))
        assert.isAbove(events.length, 2)
        assert.strictEqual(
          events
            .filter((e) => e.event === "delta")
            .map((e) => e.data.text)
            .join(""),
          "One two three four"
        )
        assert.deepStrictEqual(events[events.length - 1], {
          event: "done",
          data: { reply: "One two three four", conversationId: "s", tokens: 13, model: "openai/gpt-4o-mini" }
        })
        assert.strictEqual(fake.requests[0]!.body.stream, true)
        const client = yield* TestClient
        const turns = yield* client.request("GET", `/api/agents/${agentId}/conversations/s/messages`, {
          headers: TestServer.bearer(account.token)
        })
        assert.strictEqual(turns.body.data[0].reply, "One two three four")
        assert.strictEqual(turns.body.data[0].tokens, 13)
      })
    )
  })

  describe("Anthropic Messages", () => {
    it.effect("sends the system prompt at the top level with the key and version headers", () =>
      Effect.gen(function* () {
        const fake = yield* FakeAnthropic
        fake.reset()
        const { chat } = yield* setUp("anthropic/claude-sonnet-4-5")
        fake.script({ text: "Hi there.", usage: { input: 14, output: 4 }, model: "claude-sonnet-4-5-20250929" })
        const response = yield* chat({ message: "Hello", conversationId: "a" })
        assert.deepStrictEqual(response.body, {
          reply: "Hi there.",
          conversationId: "a",
          tokens: 18,
          model: "anthropic/claude-sonnet-4-5-20250929"
        })
        const sent = fake.requests[0]!
        assert.strictEqual(sent.headers["x-api-key"], anthropicKey)
        assert.strictEqual(sent.headers["anthropic-version"], "2023-06-01")
        assert.strictEqual(sent.body.model, "claude-sonnet-4-5")
        assert.strictEqual(sent.body.system, instructions)
        assert.deepStrictEqual(sent.body.messages, [{ role: "user", content: "Hello" }])
      })
    )
  })

  describe("provider failures become problems, never a hang or a 500", () => {
    it.effect("429 with Retry-After is retried after that delay, then answers", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { chat } = yield* setUp("openai/gpt-4o-mini")
        fake.script({ status: 429, headers: { "retry-after": "1" } }, { text: "Finally." })
        const started = Date.now()
        const response = yield* chat({ message: "hi" })
        assert.strictEqual(response.status, 200)
        assert.strictEqual(response.body.reply, "Finally.")
        assert.isAtLeast(Date.now() - started, 900)
        assert.strictEqual(fake.requests.length, 2)
      })
    )

    it.effect("a provider that keeps failing gives 502 with its message", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { chat } = yield* setUp("openai/gpt-4o-mini")
        fake.script({ status: 500, times: 2, message: "The server had an error" })
        const response = yield* chat({ message: "hi" })
        assert.strictEqual(response.status, 502)
        assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
        assert.include(response.body.detail, "The server had an error")
        assert.strictEqual(fake.requests.length, 2)
      })
    )

    it.effect("a provider that hangs past the timeout gives 504", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { chat } = yield* setUp("openai/gpt-4o-mini")
        fake.script({ hang: true, times: 2 })
        const started = Date.now()
        const response = yield* chat({ message: "hi" })
        assert.strictEqual(response.status, 504)
        assert.isBelow(Date.now() - started, 10_000)
      })
    )

    it.effect("a failed turn is not stored", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { account, agentId, chat } = yield* setUp("openai/gpt-4o-mini")
        fake.script({ status: 400, message: "Invalid request" })
        const response = yield* chat({ message: "hi", conversationId: "failed" })
        assert.strictEqual(response.status, 502)
        const client = yield* TestClient
        const turns = yield* client.request("GET", `/api/agents/${agentId}/conversations/failed/messages`, {
          headers: TestServer.bearer(account.token)
        })
        assert.strictEqual(turns.status, 404)
      })
    )
  })
})

// Budget: the system prompt, the new message and exactly one earlier turn.
const turnText = (n: number) => `This is message number ${n} of the conversation about trimming.`
const fakeReply = "Noted."
const budget =
  countTokens(instructions) + countTokens(turnText(3)) + countTokens(turnText(2)) + countTokens(fakeReply) + 2

layer(withFakes({ modelContextTokens: budget, modelTimeout: Duration.seconds(10) }), { excludeTestServices: true })(
  "history within the model's budget",
  (it) => {
    it.effect("drops the oldest turns first and keeps the system prompt", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ text: fakeReply })
        const { chat } = yield* setUp("openai/gpt-4o-mini")
        for (const n of [1, 2, 3]) yield* chat({ message: turnText(n), conversationId: "long" })
        assert.deepStrictEqual(fake.requests[2]!.body.messages, [
          { role: "system", content: instructions },
          { role: "user", content: turnText(2) },
          { role: "assistant", content: fakeReply },
          { role: "user", content: turnText(3) }
        ])
      })
    )

    it.effect(
      "a client that disconnects mid-stream leaves no half-written turn and does not block the conversation",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          fake.setDefault({ text: fakeReply })
          const { account, agentId } = yield* setUp("openai/gpt-4o-mini")
          const key = yield* TestServer.createKey(account, ["chat"])
          const client = yield* TestClient
          fake.script({ text: "one two three four five six", stallAfter: 2 })
          const controller = new AbortController()
          yield* Effect.promise(async () => {
            const response = await fetch(`${client.baseUrl}/api/v1/agents/${agentId}/chat`, {
              method: "POST",
              headers: {
                ...TestServer.bearer(key.key),
                "content-type": "application/json",
                accept: "text/event-stream"
              },
              body: JSON.stringify({ message: "Stream please", conversationId: "cut" }),
              signal: controller.signal
            })
            const reader = response.body!.getReader()
            await reader.read()
            controller.abort()
          }).pipe(Effect.catchCause(() => Effect.void))
          const started = Date.now()
          const next = yield* client.request("POST", `/api/v1/agents/${agentId}/chat`, {
            headers: TestServer.bearer(key.key),
            body: { message: "Are you there?", conversationId: "cut" }
          })
          assert.strictEqual(next.status, 200)
          // Well under the 10 s model timeout: the abandoned stream was interrupted, not waited out.
          assert.isBelow(Date.now() - started, 5_000)
          const turns = yield* client.request("GET", `/api/agents/${agentId}/conversations/cut/messages`, {
            headers: TestServer.bearer(account.token)
          })
          assert.deepStrictEqual(
            turns.body.data.map((t: { message: string }) => t.message),
            ["Are you there?"]
          )
        })
    )
  }
)
