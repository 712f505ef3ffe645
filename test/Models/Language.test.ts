import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Stream } from "effect"
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
// A stream answers its parts in two chunks.
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
      streamText: (options: LanguageModel.ProviderOptions) =>
        Stream.suspend(() => {
          seen.push(options)
          const copy = structuredClone(parts) as Array<Response.StreamPartEncoded>
          return Stream.fromArrays(copy.slice(0, 2), copy.slice(2))
        })
    }
  }
}

const failureReason = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return undefined
  const error = exit.cause.reasons[0]
  return error?._tag === "Fail" ? (error.error as { reason: { _tag: string } }).reason._tag : error?._tag
}

const both = (parts: ReadonlyArray<unknown>, prompt: Prompt.RawInput) =>
  Effect.gen(function* () {
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
    Effect.gen(function* () {
      const parts = [
        { type: "response-metadata", id: "resp_1", modelId: "m-1", timestamp: "2026-11-26T08:00:00.000Z" },
        { type: "reasoning", text: "thinking" },
        { type: "text", text: "Hello, " },
        { type: "text", text: "world." },
        { type: "finish", reason: "stop", usage }
      ]
      const prompt = [
        { role: "system" as const, content: "Be brief." },
        { role: "user" as const, content: "Hi" }
      ]
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
        [
          effects!.tools,
          effects!.toolChoice,
          effects!.responseFormat,
          effects!.previousResponseId,
          effects!.incrementalPrompt
        ]
      )
      assert.strictEqual(mine!.span.name, "LanguageModel.generateText")
    })
  )

  it.effect("a reply that does not match the schema fails as effect's does, with InvalidOutputError", () =>
    Effect.gen(function* () {
      const { ours, theirs } = yield* both([{ type: "text", text: 42 }], "Hi")
      assert.isTrue(Exit.isFailure(ours) && Exit.isFailure(theirs))
      assert.strictEqual(failureReason(ours), "InvalidOutputError")
      assert.strictEqual(failureReason(ours), failureReason(theirs))
    })
  )

  it.effect("made once: the same decoded reply for many calls, each with its own span", () =>
    Effect.gen(function* () {
      const { params, seen } = hooks([
        { type: "text", text: "again" },
        { type: "finish", reason: "stop", usage }
      ])
      const model = yield* Language.make(params)
      const replies = yield* Effect.forEach(
        Array.from({ length: 5 }, (_, i) => `Q${i}`),
        (prompt) => model.generateText({ prompt })
      )
      assert.deepStrictEqual(
        replies.map((reply) => reply.text),
        Array(5).fill("again")
      )
      assert.strictEqual(new Set(seen.map((options) => options.span)).size, 5)
    })
  )

  it.effect("streams a reply's parts as effect's LanguageModel does, and fails a bad part the same way", () =>
    Effect.gen(function* () {
      const streamed = (parts: ReadonlyArray<unknown>) =>
        Effect.gen(function* () {
          const ours = hooks(parts)
          const theirs = hooks(parts)
          const lean = yield* Language.make(ours.params)
          const effects = yield* LanguageModel.make(theirs.params)
          const run = (model: LanguageModel.LanguageModel) =>
            Effect.exit(Stream.runCollect(model.streamText({ prompt: "Hi" })))
          return { ours: yield* run(lean), theirs: yield* run(effects), seen: [ours.seen, theirs.seen] as const }
        })
      const good = yield* streamed([
        { type: "response-metadata", id: "resp_2", modelId: "m-1", timestamp: "2026-11-26T08:00:00.000Z" },
        { type: "text-start", id: "0" },
        { type: "text-delta", id: "0", delta: "Hel" },
        { type: "text-delta", id: "0", delta: "lo" },
        { type: "text-end", id: "0" },
        { type: "finish", reason: "stop", usage }
      ])
      assert.isTrue(Exit.isSuccess(good.ours) && Exit.isSuccess(good.theirs))
      if (!Exit.isSuccess(good.ours) || !Exit.isSuccess(good.theirs)) return
      assert.deepStrictEqual(good.ours.value, good.theirs.value)
      assert.deepStrictEqual(
        good.ours.value.flatMap((part) => (part.type === "text-delta" ? [part.delta] : [])),
        ["Hel", "lo"]
      )
      assert.strictEqual(good.seen[0][0]!.span.name, "LanguageModel.streamText")
      assert.deepStrictEqual(good.seen[0][0]!.prompt, good.seen[1][0]!.prompt)

      const bad = yield* streamed([{ type: "text-delta", id: "0", delta: 7 }])
      assert.strictEqual(failureReason(bad.ours), "InvalidOutputError")
      assert.strictEqual(failureReason(bad.ours), failureReason(bad.theirs))
    })
  )
})
