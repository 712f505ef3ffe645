import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as Traced from "../../src/Observability/Traced.ts"

describe("Traced.fn", () => {
  const spanName = Traced.fn("Traced.test")(function* (n: number) {
    const span = yield* Effect.option(Effect.currentSpan)
    return { n, span: Option.map(span, (s) => s.name) }
  })

  it.effect("is a span of its own only while spans are exported", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual(yield* spanName(1), { n: 1, span: Option.none() })
      const stop = Traced.startExporting()
      try {
        assert.deepStrictEqual(yield* spanName(2), { n: 2, span: Option.some("Traced.test") })
      } finally {
        stop()
      }
      assert.deepStrictEqual(yield* spanName(3), { n: 3, span: Option.none() })
      assert.strictEqual(spanName.length, 1)
    })
  )

  it.effect("withSpan is a span only while spans are exported, decided when the effect runs", () =>
    Effect.gen(function* () {
      // Made once, before exporting starts, and run before, during and after.
      const spanned = Effect.option(Effect.currentSpan).pipe(
        Effect.map(Option.map((span) => span.name)),
        Traced.withSpan("Traced.span")
      )
      assert.deepStrictEqual(yield* spanned, Option.none())
      const stop = Traced.startExporting()
      try {
        assert.deepStrictEqual(yield* spanned, Option.some("Traced.span"))
      } finally {
        stop()
      }
      assert.deepStrictEqual(yield* spanned, Option.none())
    })
  )

  it.effect("keeps Effect.fn for a body that is not a generator", () =>
    Effect.gen(function* () {
      const plain = (
        Traced.fn as unknown as (
          name: string
        ) => (body: (n: number) => Effect.Effect<number>) => (n: number) => Effect.Effect<number>
      )("Traced.plain")((n) => Effect.succeed(n * 2))
      assert.strictEqual(yield* plain(21), 42)
    })
  )
})
