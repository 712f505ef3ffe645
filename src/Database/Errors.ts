import type * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import { isSqlError, type SqlError } from "effect/sql/SqlError"

// What a failed statement means for the caller, read from its SQLSTATE.

const sqlState = (error: SqlError): string | undefined => {
  const cause = error.reason.cause
  const code = typeof cause === "object" && cause !== null ? (cause as { code?: unknown }).code : undefined
  return typeof code === "string" ? code : undefined
}

/**
 * The database could not be reached or is not serving right now: a lost or
 * refused connection (class 08), a restart or shutdown (57P01-57P03), no
 * room (class 53), or a statement timeout. Trying again later may succeed.
 */
export const isUnavailable = (error: SqlError): boolean => {
  switch (error.reason._tag) {
    case "ConnectionError":
    case "StatementTimeoutError":
      return true
    default: {
      const code = sqlState(error)
      return (
        code !== undefined &&
        (code.startsWith("08") ||
          code.startsWith("53") ||
          code === "57P01" ||
          code === "57P02" ||
          code === "57P03" ||
          code === "57014")
      )
    }
  }
}

/** Worth running again as it is: unavailability, or a deadlock, a serialization failure or a lock timeout. */
export const isTransient = (error: SqlError): boolean =>
  isUnavailable(error) ||
  error.reason._tag === "DeadlockError" ||
  error.reason._tag === "SerializationError" ||
  error.reason._tag === "LockTimeoutError"

/** Postgres refused a value (class 22: NUL in text, a bad escape in jsonb, out of range...). */
export const isDataException = (error: SqlError): boolean => sqlState(error)?.startsWith("22") === true

/** The first SqlError a cause carries, as a failure or as a defect. */
export const findSqlError = (cause: Cause.Cause<unknown>): SqlError | undefined => {
  for (const reason of cause.reasons) {
    const value = reason._tag === "Fail" ? reason.error : reason._tag === "Die" ? reason.defect : undefined
    if (isSqlError(value)) return value
  }
  return undefined
}

const isTransientSqlError = (error: unknown): boolean => isSqlError(error) && isTransient(error)

const transientBackoff = (within: Duration.Input): Schedule.Schedule<unknown> =>
  Schedule.exponential(Duration.millis(100)).pipe(
    Schedule.modifyDelay(({ duration }) => Effect.succeed(Duration.min(duration, Duration.seconds(5)))),
    Schedule.jittered,
    Schedule.upTo({ duration: within }),
    Schedule.passthrough,
    Schedule.while(({ input }) => isTransientSqlError(input))
  )

// The usual retry's schedule, made once.
const withinTwoMinutes = transientBackoff(Duration.minutes(2))

/**
 * Runs `effect` again while it fails with a transient SqlError: exponential
 * backoff from 100 ms, at most 5 s apart, for up to `within` in all. Any
 * other failure, or the last transient one, is returned as it is.
 *
 * Every statement of a durable run goes through this, and nearly all succeed
 * at once, so the retry (the schedule's state for this call) is set up only
 * after a transient failure: it is then stepped with that failure first, as
 * if it had been the retry's own first attempt. Setting it up on every call
 * was about a twentieth of what a one-step run allocated.
 */
export const retryTransient = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  within?: Duration.Input
): Effect.Effect<A, E, R> =>
  Effect.catch(effect, (error) => {
    if (!isTransientSqlError(error)) return Effect.fail(error)
    let first = true
    const again = Effect.suspend(() => {
      if (!first) return effect
      first = false
      return Effect.fail(error)
    })
    return Effect.retry(again, within === undefined ? withinTwoMinutes : transientBackoff(within))
  })
