import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Language from "../../src/Models/Language.ts"

// Language.make answers a prompt-only generateText itself (its reply schema
// made once); what it answers must be what effect's LanguageModel.make
// answers for the same provider reply, so a change in effect's decoding
// fails here.

const usage: typeof Response.Usage.Encoded = {
  inputTokens: { total: 12, uncached: 10, cacheRead: 2, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined }
}

// The provider hooks, as a provider module gives them to LanguageModel.make:
// they answer `parts` and note the options they were called with.
const hooks = (parts: ReadonlyArray<unknown>) => {
  const seen: Array<LanguageModel.ProviderOptions> = []
  return {
    seen,
    params: {
      generateText: (options: LanguageModel.ProviderOptions) =>
        Effect.sync(() => {
          seen.push(options)
          return structuredClone(parts) as Array<Response.PartEncoded>
        }),
      streamText: () => {
        throw new Error("not used")
      }
    }
  }
}

const both = (parts: ReadonlyArray<unknown>, prompt: Prompt.RawInput) =>
  Effect.gen(function*() {
    const ours = hooks(parts)
    const theirs = hooks(parts)
    const lean = yield* Language.make(ours.params)
    const effects = yield* LanguageModel.make(theirs.params)
    return {
      ours: yield* Effect.exit(lean.generateText({ prompt })),
      theirs: yield* Effect.exit(effects.generateText({ prompt })),
      seen: [ours.seen, theirs.seen] as const
    }
  })

describe("Language.make", () => {
  it.effect("decodes a reply as effect's LanguageModel does: content, text, usage and finish reason", () =>
    Effect.gen(function*() {
      const parts = [
        { type: "response-metadata", id: "resp_1", modelId: "m-1", timestamp: "2026-11-26T08:00:00.000Z" },
        { type: "reasoning", text: "thinking" },
        { type: "text", text: "Hello, " },
        { type: "text", text: "world." },
        { type: "finish", reason: "stop", usage }
      ]
      const prompt = [{ role: "system" as const, content: "Be brief." }, { role: "user" as const, content: "Hi" }]
      const { ours, seen, theirs } = yield* both(parts, prompt)
      assert.isTrue(Exit.isSuccess(ours) && Exit.isSuccess(theirs))
      if (!Exit.isSuccess(ours) || !Exit.isSuccess(theirs)) return
      assert.deepStrictEqual(ours.value.content, theirs.value.content)
      assert.strictEqual(ours.value.text, "Hello, world.")
      assert.strictEqual(ours.value.text, theirs.value.text)
      assert.deepStrictEqual(ours.value.usage, theirs.value.usage)
      assert.strictEqual(ours.value.usage.inputTokens.total, 12)
      assert.strictEqual(ours.value.finishReason, theirs.value.finishReason)
      // The provider got the same prompt and options.
      const [[mine], [effects]] = seen
      assert.deepStrictEqual(mine!.prompt, effects!.prompt)
      assert.deepStrictEqual(
        [mine!.tools, mine!.toolChoice, mine!.responseFormat, mine!.previousResponseId, mine!.incrementalPrompt],
        [effects!.tools, effects!.toolChoice, effects!.responseFormat, effects!.previousResponseId, effects!.incrementalPrompt]
      )
      assert.strictEqual(mine!.span.name, "LanguageModel.generateText")
    }))

  it.effect("a reply that does not match the schema fails as effect's does, with InvalidOutputError", () =>
    Effect.gen(function*() {
      const { ours, theirs } = yield* both([{ type: "text", text: 42 }], "Hi")
      assert.isTrue(Exit.isFailure(ours) && Exit.isFailure(theirs))
      const reason = (exit: typeof ours) => {
        if (Exit.isSuccess(exit)) return undefined
        const error = exit.cause.reasons[0]
        return error?._tag === "Fail" ? (error.error as { reason: { _tag: string } }).reason._tag : error?._tag
      }
      assert.strictEqual(reason(ours), "InvalidOutputError")
      assert.strictEqual(reason(ours), reason(theirs))
    }))

  it.effect("made once: the same decoded reply for many calls, each with its own span", () =>
    Effect.gen(function*() {
      const { params, seen } = hooks([{ type: "text", text: "again" }, { type: "finish", reason: "stop", usage }])
      const model = yield* Language.make(params)
      const replies = yield* Effect.forEach(Array.from({ length: 5 }, (_, i) => `Q${i}`), (prompt) => model.generateText({ prompt }))
      assert.deepStrictEqual(replies.map((reply) => reply.text), Array(5).fill("again"))
      assert.strictEqual(new Set(seen.map((options) => options.span)).size, 5)
    }))
})
