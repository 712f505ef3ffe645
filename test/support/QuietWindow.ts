import { Effect } from "effect"

/**
 * A deliberate quiet window: waits `ms` on the wall clock so that the test can
 * then assert that something did not happen within it (a second delivery, an
 * attempt past the retry schedule). The only fixed wait the tests allow, and
 * only for that: waiting for something to happen is `eventually`
 * (Eventually.ts). On the wall clock, so it also works under effect's test clock.
 */
export const quietWindow = (ms: number): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(timer))
  })
