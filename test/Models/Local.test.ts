import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { ModelRequest } from "../../src/Models/Models.ts"
import { buildModels, collect, deltaText } from "./Harness.ts"

const request = (system: string, ...contents: Array<string>): ModelRequest => ({
  model: "local",
  system,
  messages: contents.map((content, index) => ({ role: index % 2 === 0 ? "user" : "assistant", content })),
  maxOutputTokens: 1024
})

describe("local model", () => {
  it.live("says what it is and gives the same reply to the same input", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = request("You are Scout, a hiking guide.", "Which trail is best for beginners?")

      const first = yield* models.generate(input)
      const second = yield* models.generate(input)

      assert.isTrue(first.text.startsWith("[local model] "))
      assert.strictEqual(first.model, "local")
      assert.deepStrictEqual(second, first)
      assert.include(first.text, "Which trail is best for beginners?")
    })
  )

  it.live("grounds its reply in the agent's instructions", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()

      const general = yield* models.generate(
        request(
          "You are Scout, a hiking guide. Always remind people to carry water.",
          "I am planning a long hike in the desert with little water."
        )
      )
      const identity = yield* models.generate(request("Be concise. You are Scout, a hiking guide.", "Who are you?"))
      const none = yield* models.generate(request("", "Who are you?"))

      // The instruction sharing most words with the message is the one quoted.
      assert.include(general.text, "Always remind people to carry water.")
      assert.include(identity.text, "You are Scout, a hiking guide.")
      assert.notInclude(identity.text, "Be concise.")
      assert.include(none.text, "no instructions")
    })
  )

  it.live("recalls what the user said earlier, choosing the most relevant message", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()

      const reply = yield* models.generate(
        request(
          "",
          "My name is Ada.",
          "Nice to meet you.",
          "I live near the Cascade mountains.",
          "Noted.",
          "What is my name?"
        )
      )
      const mountains = yield* models.generate(
        request(
          "",
          "My name is Ada.",
          "Nice to meet you.",
          "I live near the Cascade mountains.",
          "Noted.",
          "Which mountains did I mention?"
        )
      )
      const fresh = yield* models.generate(request("", "What did I say earlier?"))

      assert.include(reply.text, 'You said earlier: "My name is Ada."')
      assert.include(mountains.text, 'You said earlier: "I live near the Cascade mountains."')
      assert.include(fresh.text, "nothing earlier to recall")
    })
  )

  it.live("connects a new message to a related earlier one", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()

      const reply = yield* models.generate(
        request(
          "",
          "I want to photograph waterfalls this summer.",
          "Sounds lovely.",
          "I also bake bread.",
          "Nice.",
          "Which lens suits waterfalls?"
        )
      )

      assert.include(reply.text, "I want to photograph waterfalls this summer.")
      assert.notInclude(reply.text, "bake bread")
    })
  )

  it.live("counts tokens with the service's tokenizer", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = request("You are Scout.", "Hello there, how are you?", "Fine.", "Where should I hike today?")

      const reply = yield* models.generate(input)

      const expectedInput =
        models.countTokens(input.system) +
        input.messages.reduce((total, message) => total + models.countTokens(message.content), 0)
      assert.strictEqual(reply.inputTokens, expectedInput)
      assert.strictEqual(reply.outputTokens, models.countTokens(reply.text))
      assert.isAbove(reply.outputTokens, 10)
    })
  )

  it.live("streams its reply word by word, ending with the same reply as generate", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = request("You are Scout, a hiking guide.", "My name is Ada.", "Hi Ada.", "What is my name?")

      const generated = yield* models.generate(input)
      const { events, error } = yield* collect(models.stream(input))

      assert.isUndefined(error)
      const deltas = events.filter((event) => event._tag === "Delta")
      assert.strictEqual(deltas.length, generated.text.split(" ").length)
      assert.strictEqual(deltaText(events), generated.text)
      assert.strictEqual(events.filter((event) => event._tag === "Done").length, 1)
      assert.deepStrictEqual(events.at(-1), { _tag: "Done", reply: generated })
    })
  )

  it.live("stops at max_tokens, on whole words, as a provider does", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = request("You are Scout, a hiking guide.", "Which trail is best for beginners?")
      const full = yield* models.generate(input)
      assert.isAbove(full.outputTokens, 12)

      const capped = yield* models.generate({ ...input, maxOutputTokens: 12 })
      assert.isAtMost(capped.outputTokens, 12)
      assert.isAbove(capped.outputTokens, 0)
      assert.strictEqual(capped.outputTokens, models.countTokens(capped.text))
      assert.isTrue(full.text.startsWith(capped.text))
      assert.isBelow(capped.text.length, full.text.length)
      const { events, error } = yield* collect(models.stream({ ...input, maxOutputTokens: 12 }))
      assert.isUndefined(error)
      assert.strictEqual(deltaText(events), capped.text)
      assert.deepStrictEqual(events.at(-1), { _tag: "Done", reply: capped })
    })
  )
})
