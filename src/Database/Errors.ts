import * as Cause from "effect/Cause"
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
      return code !== undefined &&
        (code.startsWith("08") || code.startsWith("53") || code === "57P01" || code === "57P02" ||
          code === "57P03" || code === "57014")
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

/**
 * Runs `effect` again while it fails with a transient SqlError: exponential
 * backoff from 100 ms, at most 5 s apart, for up to `within` in all. Any
 * other failure, or the last transient one, is returned as it is.
 */
export const retryTransient = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  within: Duration.Input = Duration.minutes(2)
): Effect.Effect<A, E, R> =>
  Effect.retry(effect, {
    while: (error) => isSqlError(error) && isTransient(error),
    schedule: Schedule.exponential("100 millis").pipe(
      Schedule.modifyDelay(({ duration }) => Effect.succeed(Duration.min(duration, Duration.seconds(5)))),
      Schedule.jittered,
      Schedule.upTo({ duration: within })
    )
  })
