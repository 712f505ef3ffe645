import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger, References } from "effect"
import { FakeOpenAi } from "../support/FakeOpenAi.ts"
import { anthropicKey, buildModels, collect, openaiKey, someKey } from "./Harness.ts"

const ask = (model: string) => ({
  model,
  system: "",
  messages: [{ role: "user" as const, content: "Hi" }],
  maxOutputTokens: 256
})

describe("Models", () => {
  it.live("refuses unknown providers and ids without a model name", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()

      for (const model of ["mistral/large", "gpt-4o", "openai/", "anthropic/ ", ""]) {
        const error = yield* Effect.flip(models.generate(ask(model)))
        assert.strictEqual(error._tag, "ModelError")
        assert.strictEqual(error.reason, "UnknownModel", model)
        const streamed = yield* collect(models.stream(ask(model)))
        assert.strictEqual(streamed.error?.reason, "UnknownModel", model)
        assert.deepStrictEqual(streamed.events, [])
      }
    })
  )

  it.live("counts tokens with a real tokenizer", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()

      assert.strictEqual(models.countTokens(""), 0)
      assert.strictEqual(models.countTokens("hello world"), 2)
      // o200k_base pieces, neither words nor characters.
      assert.strictEqual(models.countTokens("internationalization"), 2)
      assert.strictEqual(models.countTokens("The quick brown fox jumps over the lazy dog."), 10)
      assert.strictEqual(models.countTokens("Tokenization isn't word counting!"), 6)
      // Special-token text from a user is counted as text, not rejected.
      assert.isAbove(models.countTokens("a <|endoftext|> b"), 3)
    })
  )

  it.live("an unreachable provider: the caller's error names no host or port, the log line does", () =>
    Effect.gen(function* () {
      // A port nobody listens on: the fake's, once it is closed.
      const url = new URL(yield* Effect.scoped(Effect.map(FakeOpenAi.make(), (fake) => fake.url)))
      const logs: Array<{ readonly message: string; readonly annotations: Readonly<Record<string, unknown>> }> = []
      const capture = Logger.layer([
        Logger.make(
          ({ fiber, message }) =>
            void logs.push({
              message: (Array.isArray(message) ? message : [message]).map(String).join(" "),
              annotations: fiber.getRef(References.CurrentLogAnnotations)
            })
        )
      ])
      const models = yield* buildModels({
        openaiBaseUrl: url.href,
        openaiApiKey: someKey(openaiKey),
        anthropicBaseUrl: url.origin,
        anthropicApiKey: someKey(anthropicKey),
        modelMaxRetries: 0
      })

      for (const [model, label] of [
        ["openai/gpt-4o-mini", "OpenAI"],
        ["anthropic/claude-3-5-haiku", "Anthropic"]
      ] as const) {
        logs.length = 0
        const error = yield* Effect.flip(models.generate(ask(model))).pipe(Effect.provide(capture))
        const streamed = yield* collect(models.stream(ask(model))).pipe(Effect.provide(capture))
        for (const message of [error.message, streamed.error?.message ?? ""]) {
          assert.strictEqual(message, `The connection to ${label} failed`, model)
          assert.notInclude(message, url.hostname, model)
          assert.notInclude(message, url.port, model)
        }
        const lines = logs.filter((line) => line.message === "Model provider connection failed")
        assert.lengthOf(lines, 2, `${model}: ${JSON.stringify(logs)}`)
        for (const line of lines) assert.strictEqual(line.annotations.host, url.host, model)
      }
    })
  )

  it.live("gives every model the configured context budget", () =>
    Effect.gen(function* () {
      const models = yield* buildModels({ modelContextTokens: 1234 })

      assert.strictEqual(models.contextBudget("local"), 1234)
      assert.strictEqual(models.contextBudget("openai/gpt-4o-mini"), 1234)
    })
  )
})
