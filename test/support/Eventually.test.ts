import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit } from "effect"
import { defined, eventually } from "./Eventually.ts"

describe("eventually", () => {
  it("a promise: retries a throwing check until it holds, and gives its value", async () => {
    let tries = 0
    const value = await eventually(
      async () => {
        tries++
        assert.isAtLeast(tries, 3)
        return tries
      },
      { intervalMs: 1 }
    )
    assert.strictEqual(value, 3)
  })

  it("a promise: past the bound, fails with the check's last error", async () => {
    let tries = 0
    const started = Date.now()
    const error = await eventually(() => defined(`try ${++tries}`, undefined), { timeoutMs: 200, intervalMs: 20 }).then(
      () => assert.fail("it held"),
      (error: unknown) => error as Error
    )
    assert.isAtLeast(Date.now() - started, 180)
    assert.isAbove(tries, 2)
    assert.strictEqual(error.message, `Timed out waiting for try ${tries}`)
  })

  it("a promise: a try still running at the bound is abandoned, with the last failure as cause", async () => {
    let tries = 0
    const error = await eventually(
      () => (++tries === 1 ? Promise.reject(new Error("first")) : new Promise<never>(() => {})),
      { timeoutMs: 100, intervalMs: 10 }
    ).then(
      () => assert.fail("it held"),
      (error: unknown) => error as Error
    )
    assert.strictEqual(error.message, "The check did not finish within 100 ms")
    assert.strictEqual((error.cause as Error).message, "first")
  })

  // Under effect's test clock, which moves only when told: the waits are on the wall clock.
  it.effect("an effect: retries failures and defects (assertions) until it holds", () =>
    Effect.gen(function* () {
      let tries = 0
      const value = yield* eventually(
        Effect.suspend(() => {
          tries++
          if (tries === 1) return Effect.fail("not yet" as const)
          assert.isAtLeast(tries, 3)
          return Effect.succeed(tries)
        }),
        { intervalMs: 1 }
      )
      assert.strictEqual(value, 3)
    })
  )

  it.effect(
    "an effect: past the bound, fails with the check's last failure; a try running at the bound is interrupted",
    () =>
      Effect.gen(function* () {
        let tries = 0
        const failed = yield* Effect.exit(
          eventually(
            Effect.suspend(() => Effect.fail(`try ${++tries}`)),
            { timeoutMs: 100, intervalMs: 10 }
          )
        )
        assert.isTrue(Exit.isFailure(failed))
        if (Exit.isFailure(failed)) assert.deepStrictEqual(Cause.squash(failed.cause), `try ${tries}`)

        let interrupted = false
        const hung = yield* Effect.exit(
          eventually(
            Effect.onInterrupt(Effect.never, () => Effect.sync(() => (interrupted = true))),
            { timeoutMs: 50 }
          )
        )
        assert.isTrue(interrupted)
        assert.isTrue(Exit.isFailure(hung))
        if (Exit.isFailure(hung))
          assert.strictEqual((Cause.squash(hung.cause) as Error).message, "The check did not finish within 50 ms")
      })
  )
})
