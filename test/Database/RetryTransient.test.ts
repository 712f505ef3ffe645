import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as SqlError from "effect/sql/SqlError"
import { retryTransient } from "../../src/Database/Errors.ts"

// The retry every durable run's statements go through: a transient database
// error (a lost connection, a deadlock) is tried again with backoff within a
// bound; anything else fails at once.

const lostConnection = () =>
  new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: new Error("connection lost") }) })
const refused = () =>
  new SqlError.SqlError({ reason: new SqlError.ConstraintError({ cause: new Error("violates a check constraint") }) })

/** Fails with `errors` in turn, then succeeds with the number of attempts. */
const failingWith = (errors: ReadonlyArray<() => unknown>) => {
  let attempts = 0
  const effect = Effect.suspend(() => {
    attempts++
    return attempts <= errors.length ? Effect.fail(errors[attempts - 1]!()) : Effect.succeed(attempts)
  })
  return { effect, attempts: () => attempts }
}

describe("retryTransient", () => {
  it.live("tries a transient error again, with a delay, until the statement succeeds", () =>
    Effect.gen(function* () {
      const subject = failingWith([lostConnection, lostConnection])
      const startedAt = Date.now()
      const result = yield* retryTransient(subject.effect)
      assert.strictEqual(result, 3)
      assert.strictEqual(subject.attempts(), 3)
      // Two backoffs from 100 ms (jittered: 80 to 120% of 100 and 200 ms).
      assert.isAtLeast(Date.now() - startedAt, 200)
    })
  )

  it.live("fails at once on an error that is not transient", () =>
    Effect.gen(function* () {
      const subject = failingWith([refused])
      const exit = yield* Effect.exit(retryTransient(subject.effect))
      assert.isTrue(Exit.isFailure(exit))
      assert.strictEqual(subject.attempts(), 1)
      const error = Exit.findErrorOption(exit)
      assert.isTrue(
        error._tag === "Some" && SqlError.isSqlError(error.value) && error.value.reason._tag === "ConstraintError"
      )
    })
  )

  it.live("gives up within its bound and returns the last transient error", () =>
    Effect.gen(function* () {
      const subject = failingWith(Array.from({ length: 1000 }, () => lostConnection))
      const startedAt = Date.now()
      const exit = yield* Effect.exit(retryTransient(subject.effect, "500 millis"))
      const elapsed = Date.now() - startedAt
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.findErrorOption(exit)
      assert.isTrue(
        error._tag === "Some" && SqlError.isSqlError(error.value) && error.value.reason._tag === "ConnectionError"
      )
      assert.isAtLeast(subject.attempts(), 2)
      assert.isBelow(subject.attempts(), 10)
      assert.isBelow(elapsed, 3000)
    })
  )

  it.live("is the same retry on every call: each call counts its own attempts", () =>
    Effect.gen(function* () {
      const first = failingWith([lostConnection])
      const second = failingWith([lostConnection, lostConnection])
      const [a, b] = yield* Effect.all([retryTransient(first.effect), retryTransient(second.effect)], {
        concurrency: 2
      })
      assert.deepStrictEqual([a, b], [2, 3])
    })
  )
})
