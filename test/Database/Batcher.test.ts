import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import * as Batcher from "../../src/Database/Batcher.ts"
import { waitFor } from "../support/TestServer.ts"

describe("Batcher (group commit)", () => {
  it.live("what is submitted while a batch is written goes in the next one; each caller gets its own result", () =>
    Effect.gen(function* () {
      const batches: Array<ReadonlyArray<number>> = []
      const gate = yield* Deferred.make<void>()
      const batcher = Batcher.make({
        maxSize: 4,
        write: (items: ReadonlyArray<number>) =>
          Effect.suspend(() => {
            batches.push(items)
            return Effect.as(
              batches.length === 1 ? Deferred.await(gate) : Effect.void,
              items.map((n) => n * 10)
            )
          })
      })
      const first = yield* Effect.forkChild(batcher.submit(1))
      yield* waitFor(
        "the first batch",
        Effect.sync(() => batches.length === 1 || undefined)
      )
      // Six more while the first is held: two batches, of at most four.
      const rest = yield* Effect.forkChild(
        Effect.forEach([2, 3, 4, 5, 6, 7], batcher.submit, { concurrency: "unbounded" })
      )
      yield* Effect.sleep("50 millis")
      assert.strictEqual(batches.length, 1, "nothing else is written while a batch is in flight")
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(first), 10)
      assert.deepStrictEqual(yield* Fiber.join(rest), [20, 30, 40, 50, 60, 70])
      assert.deepStrictEqual(batches, [[1], [2, 3, 4, 5], [6, 7]])

      // Idle again: a lone item is written at once, on its own.
      assert.strictEqual(yield* batcher.submit(8), 80)
      assert.deepStrictEqual(batches[3], [8])
    })
  )

  it.live("a failed batch fails each of its callers, and the next batch is written", () =>
    Effect.gen(function* () {
      let calls = 0
      const batcher = Batcher.make({
        maxSize: 10,
        write: (items: ReadonlyArray<string>) =>
          Effect.suspend(() => {
            calls++
            return items.includes("bad")
              ? Effect.fail(`refused ${items.length}`)
              : Effect.succeed(items.map((item) => item.length))
          })
      })
      const outcomes = yield* Effect.forEach(["bad", "x", "yy"], (item) => Effect.result(batcher.submit(item)), {
        concurrency: "unbounded"
      })
      assert.deepStrictEqual(
        outcomes.map((outcome) => outcome._tag),
        ["Failure", "Failure", "Failure"]
      )
      assert.strictEqual(calls, 1)
      assert.strictEqual(yield* batcher.submit("fine"), 4)
    })
  )

  it.live("a defect while writing fails the batch's callers instead of leaving them waiting", () =>
    Effect.gen(function* () {
      const batcher = Batcher.make({
        maxSize: 10,
        write: (items: ReadonlyArray<number>) =>
          items[0] === 0 ? Effect.die(new Error("boom")) : Effect.succeed(items)
      })
      const exit = yield* Effect.exit(batcher.submit(0))
      assert.strictEqual(exit._tag, "Failure")
      assert.strictEqual(yield* batcher.submit(1), 1)
    })
  )
})
