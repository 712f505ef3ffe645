import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { buildModels, collect } from "./Harness.ts"

const ask = (model: string) => ({ model, system: "", messages: [{ role: "user" as const, content: "Hi" }], maxOutputTokens: 256 })

describe("Models", () => {
  it.live("refuses unknown providers and ids without a model name", () =>
    Effect.gen(function*() {
      const models = yield* buildModels()

      for (const model of ["mistral/large", "gpt-4o", "openai/", "anthropic/ ", ""]) {
        const error = yield* Effect.flip(models.generate(ask(model)))
        assert.strictEqual(error._tag, "ModelError")
        assert.strictEqual(error.reason, "UnknownModel", model)
        const streamed = yield* collect(models.stream(ask(model)))
        assert.strictEqual(streamed.error?.reason, "UnknownModel", model)
        assert.deepStrictEqual(streamed.events, [])
      }
    }))

  it.live("counts tokens with a real tokenizer", () =>
    Effect.gen(function*() {
      const models = yield* buildModels()

      assert.strictEqual(models.countTokens(""), 0)
      assert.strictEqual(models.countTokens("hello world"), 2)
      // o200k_base pieces, neither words nor characters.
      assert.strictEqual(models.countTokens("internationalization"), 2)
      assert.strictEqual(models.countTokens("The quick brown fox jumps over the lazy dog."), 10)
      assert.strictEqual(models.countTokens("Tokenization isn't word counting!"), 6)
      // Special-token text from a user is counted as text, not rejected.
      assert.isAbove(models.countTokens("a <|endoftext|> b"), 3)
    }))

  it.live("gives every model the configured context budget", () =>
    Effect.gen(function*() {
      const models = yield* buildModels({ modelContextTokens: 1234 })

      assert.strictEqual(models.contextBudget("local"), 1234)
      assert.strictEqual(models.contextBudget("openai/gpt-4o-mini"), 1234)
    }))
})
