import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Option, Queue } from "effect"
import * as MemoryReducer from "../../src/Runtime/MemoryReducer.ts"

// The reducer in this test's own process (each test file runs in a process of
// its own): its RSS is what the reducer reads and gives back.

const options: MemoryReducer.Options = {
  interval: "100 millis",
  quietUtilization: 0.5,
  quietFor: "300 millis",
  growthBytes: 32 * 1024 * 1024
}

/** About 200 MB of objects, each held by the returned array until it is dropped. */
const makeGarbage = () => Array.from({ length: 2_000_000 }, (_, i) => ({ i, label: `garbage ${i}`, list: [i] }))

const megabytes = 1024 * 1024

describe("memory reducer", () => {
  it.live(
    "gives back what a burst left once the node is quiet, and waits while the event loop is busy",
    () =>
      Effect.gen(function* () {
        const reductions = yield* Queue.unbounded<MemoryReducer.Reduction>()
        const reducer = yield* Effect.forkChild(
          MemoryReducer.run(options, (reduction) => Queue.offer(reductions, reduction))
        )
        // The first quiet check also drops what start-up left: the baseline.
        const first = yield* Queue.take(reductions).pipe(Effect.timeout("10 seconds"))
        assert.isBelow(first.rssAfter, first.rssBefore + 1)

        // A burst: its objects die, their pages stay with V8 until the reducer runs.
        let garbage: Array<unknown> | undefined = makeGarbage()
        const grown = process.memoryUsage.rss()
        assert.isAbove(grown, first.rssAfter + 100 * megabytes)
        garbage = undefined
        const reduced = yield* Queue.take(reductions).pipe(Effect.timeout("10 seconds"))
        assert.isUndefined(garbage)
        assert.isBelow(reduced.rssAfter, reduced.rssBefore - 100 * megabytes)
        assert.isBelow(process.memoryUsage.rss(), grown - 100 * megabytes)

        // Another burst while the loop is busy (95 ms of work every 100 ms): no
        // reduction for as long as it stays busy, then one once it stops.
        const burn = setInterval(() => {
          const until = performance.now() + 95
          while (performance.now() < until) {
            // busy
          }
        }, 100)
        garbage = makeGarbage()
        garbage = undefined
        const whileBusy = yield* Queue.take(reductions).pipe(
          Effect.timeoutOption("2 seconds"),
          Effect.ensuring(Effect.sync(() => clearInterval(burn)))
        )
        assert.isTrue(Option.isNone(whileBusy))
        const afterBusy = yield* Queue.take(reductions).pipe(Effect.timeout("10 seconds"))
        assert.isBelow(afterBusy.rssAfter, afterBusy.rssBefore - 100 * megabytes)
        yield* Fiber.interrupt(reducer)
      }),
    60_000
  )
})
