import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Option } from "effect"
import { FakeAnthropic } from "../support/FakeAnthropic.ts"
import { anthropicKey, buildModels, collect, deltaText, someKey, timed } from "./Harness.ts"

const conversation = {
  model: "anthropic/claude-3-5-haiku-latest",
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
    const fake = yield* FakeAnthropic.make({ apiKey: anthropicKey })
    const models = yield* buildModels({
      anthropicBaseUrl: fake.url,
      anthropicApiKey: someKey(anthropicKey),
      ...settings
    })
    return { fake, models }
  })

describe("Anthropic provider", () => {
  it.live("sends a Messages request with a top-level system prompt and reads text, usage and model", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script({ text: "About 12 km.", model: "claude-3-5-haiku-20241022", usage: { input: 29, output: 6 } })

      const reply = yield* models.generate(conversation)

      assert.deepStrictEqual(reply, {
        text: "About 12 km.",
        model: "anthropic/claude-3-5-haiku-20241022",
        inputTokens: 29,
        outputTokens: 6,
        toolCalls: []
      })
      assert.strictEqual(fake.requests.length, 1)
      const [request] = fake.requests
      assert.strictEqual(request!.method, "POST")
      assert.strictEqual(request!.path, "/v1/messages")
      assert.strictEqual(request!.headers["x-api-key"], anthropicKey)
      assert.strictEqual(request!.headers["anthropic-version"], "2023-06-01")
      assert.isUndefined(request!.headers.authorization)
      assert.deepStrictEqual(request!.body, {
        model: "claude-3-5-haiku-latest",
        max_tokens: 300,
        system: "You are Scout, a hiking guide.",
        messages: [
          { role: "user", content: "Where should I hike?" },
          { role: "assistant", content: "Try the ridge trail." },
          { role: "user", content: "How long is it?" }
        ]
      })
    })
  )

  it.live("leaves out `system` when there are no instructions", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      yield* models.generate({ ...conversation, system: "" })
      assert.isFalse("system" in fake.requests[0]!.body)
    })
  )

  it.live(
    "streams deltas that add up to the text, then one Done with the usage of message_start and message_delta",
    () =>
      Effect.gen(function* () {
        const { fake, models } = yield* setup()
        fake.script({
          text: "Take the ridge trail at dawn.",
          model: "claude-3-5-haiku-20241022",
          usage: { input: 44, output: 9 }
        })

        const { events, error } = yield* collect(models.stream(conversation))

        assert.isUndefined(error)
        assert.isAbove(events.filter((event) => event._tag === "Delta").length, 1)
        assert.strictEqual(deltaText(events), "Take the ridge trail at dawn.")
        assert.strictEqual(events.filter((event) => event._tag === "Done").length, 1)
        assert.deepStrictEqual(events.at(-1), {
          _tag: "Done",
          reply: {
            text: "Take the ridge trail at dawn.",
            model: "anthropic/claude-3-5-haiku-20241022",
            inputTokens: 44,
            outputTokens: 9,
            toolCalls: []
          }
        })
        const body = fake.requests[0]!.body
        assert.strictEqual(body.stream, true)
        assert.strictEqual(body.max_tokens, 300)
        assert.strictEqual(body.system, "You are Scout, a hiking guide.")
        assert.strictEqual(body.model, "claude-3-5-haiku-latest")
      })
  )

  it.live("retries 529 overloaded, then succeeds", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 3 })
      fake.script({ status: 529, times: 2 }, { text: "Back again." })

      const reply = yield* models.generate(conversation)

      assert.strictEqual(reply.text, "Back again.")
      assert.strictEqual(fake.requests.length, 3)
    })
  )

  it.live("honours a Retry-After given as an HTTP date", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 1 })
      const retryAt = new Date(Math.ceil(Date.now() / 1000) * 1000 + 1000).toUTCString()
      fake.script({ status: 429, headers: { "retry-after": retryAt } }, { text: "Waited." })

      const { result, ms } = yield* timed(models.generate(conversation))

      assert.strictEqual(result.text, "Waited.")
      assert.strictEqual(fake.requests.length, 2)
      // The date has whole seconds: it lies 1 to 2 s ahead.
      assert.isAtLeast(ms, 900)
      assert.isBelow(ms, 2_800)
    })
  )

  it.live("reports the provider's error after the retries, with its status", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 1 })
      fake.script({
        status: 429,
        message: "Number of request tokens has exceeded your per-minute rate limit",
        times: 2
      })

      const error = yield* Effect.flip(models.generate(conversation))

      assert.strictEqual(error.reason, "ProviderError")
      assert.strictEqual(error.status, 429)
      assert.include(error.message, "per-minute rate limit")
      assert.strictEqual(fake.requests.length, 2)
    })
  )

  it.live("passes a wrong key's 401 through without retrying or echoing the key", () =>
    Effect.gen(function* () {
      const fake = yield* FakeAnthropic.make({ apiKey: anthropicKey })
      const wrongKey = "sk-ant-wrong-0123456789"
      const models = yield* buildModels({ anthropicBaseUrl: fake.url, anthropicApiKey: someKey(wrongKey) })

      const error = yield* Effect.flip(models.generate(conversation))

      assert.strictEqual(error.status, 401)
      assert.include(error.message, "invalid x-api-key")
      assert.notInclude(error.message, wrongKey)
      assert.strictEqual(fake.requests.length, 1)
    })
  )

  it.live("times out and gives up on a stream that never starts", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelTimeout: Duration.millis(300), modelMaxRetries: 0 })
      fake.script({ hang: true })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.deepStrictEqual(events, [])
      assert.strictEqual(error?.reason, "Timeout")
    })
  )

  it.live("retries a stream whose overloaded_error event comes before any text", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 1 })
      fake.script({ errorAfter: 0, message: "Overloaded" }, { text: "Calmer now." })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.isUndefined(error)
      assert.strictEqual(deltaText(events), "Calmer now.")
      assert.strictEqual(fake.requests.length, 2)
    })
  )

  it.live("fails a stream whose overloaded_error event comes after text, with the provider's message", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup({ modelMaxRetries: 3 })
      fake.script({ text: "one two three", errorAfter: 1, message: "Overloaded" })

      const { events, error } = yield* collect(models.stream(conversation))

      assert.strictEqual(deltaText(events), "one ")
      assert.strictEqual(error?.reason, "ProviderError")
      assert.include(error?.message, "Overloaded")
      assert.strictEqual(fake.requests.length, 1)
    })
  )

  it.live("fails with NotConfigured and sends nothing when ANTHROPIC_API_KEY is missing", () =>
    Effect.gen(function* () {
      const fake = yield* FakeAnthropic.make()
      const models = yield* buildModels({ anthropicBaseUrl: fake.url, anthropicApiKey: Option.none() })

      const error = yield* Effect.flip(models.generate(conversation))
      const streamed = yield* collect(models.stream(conversation))

      assert.strictEqual(error.reason, "NotConfigured")
      assert.include(error.message, "ANTHROPIC_API_KEY")
      assert.strictEqual(streamed.error?.reason, "NotConfigured")
      assert.strictEqual(fake.requests.length, 0)
    })
  )
})
