import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Option } from "effect"
import { ceilingField } from "../../src/Models/OpenAi.ts"
import { FakeOpenAi } from "../support/FakeOpenAi.ts"
import { buildModels, collect, deltaText, openaiKey, someKey, timed } from "./Harness.ts"

const conversation = {
  model: "openai/gpt-4o-mini",
  system: "You are Scout, a hiking guide.",
  messages: [
    { role: "user" as const, content: "Where should I hike?" },
    { role: "assistant" as const, content: "Try the ridge trail." },
    { role: "user" as const, content: "How long is it?" }
  ],
  maxOutputTokens: 300
}

const setup = (settings: Parameters<typeof buildModels>[0] = {}) =>
  Effect.gen(function* () {
    const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
    const models = yield* buildModels({ openaiBaseUrl: fake.url, openaiApiKey: someKey(openaiKey), ...settings })
    return { fake, models }
  })

describe("OpenAI provider", () => {
  it.live("sends a Chat Completions request and reads text, usage and the reported model", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script({ text: "About 12 km.", model: "gpt-4o-mini-2024-07-18", usage: { input: 31, output: 5 } })

      const reply = yield* models.generate(conversation)

      assert.deepStrictEqual(reply, {
        text: "About 12 km.",
        model: "openai/gpt-4o-mini-2024-07-18",
        inputTokens: 31,
        outputTokens: 5,
        toolCalls: []
      })
      assert.strictEqual(fake.requests.length, 1)
      const [request] = fake.requests
      assert.strictEqual(request!.method, "POST")
      assert.strictEqual(request!.path, "/v1/chat/completions")
      assert.strictEqual(request!.headers.authorization, `Bearer ${openaiKey}`)
      assert.match(request!.headers["content-type"]!, /^application\/json/)
      assert.deepStrictEqual(request!.body, {
        model: "gpt-4o-mini",
        max_tokens: 300,
        messages: [
          { role: "system", content: "You are Scout, a hiking guide." },
          { role: "user", content: "Where should I hike?" },
          { role: "assistant", content: "Try the ridge trail." },
          { role: "user", content: "How long is it?" }
        ]
      })
    })
  )

  it.live("sends no system message when there are no instructions", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      yield* models.generate({ ...conversation, system: "" })
      assert.deepStrictEqual(
        fake.requests[0]!.body.messages.map((m: any) => m.role),
        ["user", "assistant", "user"]
      )
    })
  )

  it.live("streams deltas that add up to the text, then one Done with usage", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script({
        text: "Take the ridge trail at dawn.",
        model: "gpt-4o-mini-2024-07-18",
        usage: { input: 40, output: 8 }
      })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.isUndefined(error)
      const deltas = events.filter((event) => event._tag === "Delta")
      assert.isAbove(deltas.length, 1)
      assert.strictEqual(deltaText(events), "Take the ridge trail at dawn.")
      assert.strictEqual(events.filter((event) => event._tag === "Done").length, 1)
      assert.deepStrictEqual(events.at(-1), {
        _tag: "Done",
        reply: {
          text: "Take the ridge trail at dawn.",
          model: "openai/gpt-4o-mini-2024-07-18",
          inputTokens: 40,
          outputTokens: 8,
          toolCalls: []
        }
      })
      const body = fake.requests[0]!.body
      assert.strictEqual(body.stream, true)
      assert.deepStrictEqual(body.stream_options, { include_usage: true })
      assert.strictEqual(body.max_tokens, 300)
      assert.strictEqual(body.model, "gpt-4o-mini")
      assert.strictEqual(body.messages[0].role, "system")
    })
  )

  it.live("retries a 429 after its Retry-After, then succeeds", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 3 })
      fake.script({ status: 429, headers: { "retry-after": "1" } }, { text: "Made it." })

      const { result, ms } = yield* timed(models.generate(conversation))

      assert.strictEqual(result.text, "Made it.")
      assert.strictEqual(fake.requests.length, 2)
      assert.isAtLeast(ms, 950)
      assert.isBelow(ms, 2_500)
    })
  )

  it.live("retries 500s up to modelMaxRetries, then fails with the status and the provider's message", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 2 })
      fake.script({ status: 500, message: "The server had an error while processing your request.", times: 5 })

      const error = yield* Effect.flip(models.generate(conversation))

      assert.strictEqual(error.reason, "ProviderError")
      assert.strictEqual(error.status, 500)
      assert.include(error.message, "The server had an error while processing your request.")
      assert.strictEqual(fake.requests.length, 3)
    })
  )

  it.live("does not retry other 4xx", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 3 })
      fake.script({ status: 404, message: "The model `gpt-9` does not exist or you do not have access to it." })

      const error = yield* Effect.flip(models.generate({ ...conversation, model: "openai/gpt-9" }))

      assert.strictEqual(error.reason, "ProviderError")
      assert.strictEqual(error.status, 404)
      assert.include(error.message, "The model `gpt-9` does not exist")
      assert.strictEqual(fake.requests.length, 1)
    })
  )

  it.live("never puts an API key in an error message", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script({ status: 401, message: `Incorrect API key provided: ${openaiKey}.` })

      const error = yield* Effect.flip(models.generate(conversation))

      assert.strictEqual(error.status, 401)
      assert.notInclude(error.message, openaiKey)
      assert.include(error.message, "[redacted]")
    })
  )

  it.live("times out a provider that never answers, without retrying it", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelTimeout: Duration.millis(300), modelMaxRetries: 2 })
      fake.script({ hang: true, times: 3 })

      const { result: error, ms } = yield* timed(Effect.flip(models.generate(conversation)))

      assert.strictEqual(error.reason, "Timeout")
      assert.isUndefined(error.status)
      assert.isAtLeast(ms, 280)
      assert.isBelow(ms, 1_500)
      assert.strictEqual(fake.requests.length, 1)
    })
  )

  it.live("times out a stream that never starts", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelTimeout: Duration.millis(300), modelMaxRetries: 0 })
      fake.script({ hang: true })

      const { result, ms } = yield* timed(collect(models.stream(conversation)))

      assert.deepStrictEqual(result.events, [])
      assert.strictEqual(result.error?.reason, "Timeout")
      assert.isBelow(ms, 1_500)
    })
  )

  it.live("times out a stream that goes silent after some text, keeping what arrived", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelTimeout: Duration.millis(300), modelMaxRetries: 2 })
      fake.script({ text: "one two three four", stallAfter: 2 })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.strictEqual(deltaText(events), "one two ")
      assert.strictEqual(error?.reason, "Timeout")
      assert.strictEqual(fake.requests.length, 1)
    })
  )

  it.live("retries a stream that fails before its first delta", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 2 })
      fake.script({ status: 503 }, { text: "Second time lucky." })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.isUndefined(error)
      assert.strictEqual(deltaText(events), "Second time lucky.")
      assert.strictEqual(fake.requests.length, 2)
    })
  )

  it.live("retries a stream cut before its first delta", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 1 })
      fake.script({ text: "lost", dropAfter: 0 }, { text: "Here it is." })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.isUndefined(error)
      assert.strictEqual(deltaText(events), "Here it is.")
      assert.strictEqual(fake.requests.length, 2)
    })
  )

  it.live("does not retry a stream cut after text was delivered", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 3 })
      fake.script({ text: "one two three four", dropAfter: 2 })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.strictEqual(deltaText(events), "one two ")
      assert.isFalse(events.some((event) => event._tag === "Done"))
      assert.strictEqual(error?.reason, "ProviderError")
      assert.include(error?.message, "connection")
      assert.strictEqual(fake.requests.length, 1)
    })
  )

  it.live("fails a stream on an in-stream error payload, with its message", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 0 })
      fake.script({ text: "one two three", errorAfter: 2, message: "The model produced invalid content." })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.strictEqual(deltaText(events), "one two ")
      assert.strictEqual(error?.reason, "ProviderError")
      assert.include(error?.message, "The model produced invalid content.")
    })
  )

  it.live("reports a server that cannot be reached", () =>
    Effect.gen(function* () {
      // A port nobody listens on: the fake's, once it is closed.
      const url = yield* Effect.scoped(Effect.map(FakeOpenAi.make(), (fake) => fake.url))
      const models = yield* buildModels({ openaiBaseUrl: url, openaiApiKey: someKey(openaiKey), modelMaxRetries: 1 })

      const error = yield* Effect.flip(models.generate(conversation))

      assert.strictEqual(error.reason, "ProviderError")
      assert.isUndefined(error.status)
      // Where the provider lives stays in the logs (Models.test.ts).
      assert.strictEqual(error.message, "The connection to OpenAI failed")
    })
  )

  it.live("needs OPENAI_API_KEY for the public API and fails at once without it", () =>
    Effect.gen(function* () {
      const models = yield* buildModels({ openaiApiKey: Option.none() })

      const error = yield* Effect.flip(models.generate(conversation))
      const streamed = yield* collect(models.stream(conversation))

      // A request to api.openai.com would have failed otherwise (network or 401).
      assert.strictEqual(error.reason, "NotConfigured")
      assert.include(error.message, "OPENAI_API_KEY")
      assert.strictEqual(streamed.error?.reason, "NotConfigured")
      assert.deepStrictEqual(streamed.events, [])
    })
  )

  it.live("talks to an OpenAI-compatible server without a key, sending no Authorization", () =>
    Effect.gen(function* () {
      const fake = yield* FakeOpenAi.make()
      const models = yield* buildModels({ openaiBaseUrl: fake.url, openaiApiKey: Option.none() })
      fake.script({ text: "Hi from llama.", model: "llama3.2:latest" })

      const reply = yield* models.generate({ ...conversation, model: "openai/llama3.2" })

      assert.strictEqual(reply.model, "openai/llama3.2:latest")
      assert.strictEqual(fake.requests[0]!.body.model, "llama3.2")
      assert.isUndefined(fake.requests[0]!.headers.authorization)
    })
  )

  it("names the reply's ceiling as OpenAI's own API and compatible servers know it", () => {
    assert.strictEqual(ceilingField("https://api.openai.com/v1"), "max_completion_tokens")
    assert.strictEqual(ceilingField("http://localhost:11434/v1"), "max_tokens")
    assert.strictEqual(ceilingField("https://openrouter.ai/api/v1"), "max_tokens")
  })
})
