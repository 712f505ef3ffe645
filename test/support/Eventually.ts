import { Cause, Effect, Exit } from "effect"

/** How long `eventually` keeps trying, and how long it waits between tries. */
export interface Bound {
  /** Gives up this long after the first try (default 15 s). */
  readonly timeoutMs?: number
  /** Waits this long after a failed try (default 50 ms). */
  readonly intervalMs?: number
}

const defaults = { timeoutMs: 15_000, intervalMs: 50 }

/**
 * Tries `check` until it succeeds, and gives its value; a check fails by
 * throwing (an assertion) or, as an effect, by failing or dying. Past the
 * bound it fails with the check's last failure; a try still running at the
 * bound is abandoned (an effect's is interrupted) and the failure says so,
 * with the last failure as its cause. Waits on the wall clock, so it also
 * works under effect's test clock.
 *
 * Two forms: give an effect and get an effect, or give a function (sync or
 * async) and get a promise.
 */
export function eventually<A, E, R>(check: Effect.Effect<A, E, R>, bound?: Bound): Effect.Effect<A, E, R>
export function eventually<A>(check: () => A | PromiseLike<A>, bound?: Bound): Promise<A>
export function eventually(
  check: Effect.Effect<unknown, unknown, unknown> | (() => unknown),
  bound: Bound = {}
): unknown {
  const { intervalMs, timeoutMs } = { ...defaults, ...bound }
  return Effect.isEffect(check)
    ? eventuallyEffect(check, timeoutMs, intervalMs)
    : eventuallyPromise(check as () => unknown, timeoutMs, intervalMs)
}

/**
 * `value`, or an error saying what is still awaited: for checks that look for
 * something to appear (`eventually(() => defined("the delivery", receiver.requests[0]))`).
 */
export const defined = <A>(what: string, value: A | undefined): A => {
  if (value === undefined) throw new Error(`Timed out waiting for ${what}`)
  return value
}

const cutOff = (timeoutMs: number, last: unknown) =>
  new Error(`The check did not finish within ${timeoutMs} ms`, last === undefined ? {} : { cause: last })

const wallClockSleep = (ms: number) =>
  Effect.callback<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(timer))
  })

const eventuallyEffect = <A, E, R>(check: Effect.Effect<A, E, R>, timeoutMs: number, intervalMs: number) =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    let last: Cause.Cause<E> | undefined
    while (true) {
      const remaining = Math.max(deadline - Date.now(), intervalMs)
      const exit = yield* Effect.raceFirst(Effect.exit(check), Effect.as(wallClockSleep(remaining), undefined))
      if (exit === undefined)
        return yield* Effect.die(cutOff(timeoutMs, last === undefined ? undefined : Cause.squash(last)))
      if (Exit.isSuccess(exit)) return exit.value
      last = exit.cause
      if (deadline - Date.now() < intervalMs) return yield* Effect.failCause(last)
      yield* wallClockSleep(intervalMs)
    }
  })

const eventuallyPromise = async <A>(check: () => A | PromiseLike<A>, timeoutMs: number, intervalMs: number) => {
  const deadline = Date.now() + timeoutMs
  let last: { readonly error: unknown } | undefined
  while (true) {
    const remaining = Math.max(deadline - Date.now(), intervalMs)
    let timer: ReturnType<typeof setTimeout> | undefined
    const attempt = Promise.resolve().then(check)
    // An abandoned try may still fail later: that failure is no longer anyone's.
    attempt.catch(() => {})
    const outcome = await Promise.race([
      attempt.then(
        (value) => ({ value }),
        (error: unknown) => ({ error })
      ),
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), remaining)
      })
    ]).finally(() => clearTimeout(timer))
    if (outcome === undefined) throw cutOff(timeoutMs, last?.error)
    if ("value" in outcome) {
      if (Effect.isEffect(outcome.value))
        throw new TypeError("eventually: give the effect itself, not a function returning it")
      return outcome.value
    }
    last = outcome
    if (deadline - Date.now() < intervalMs) throw last.error
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
}
