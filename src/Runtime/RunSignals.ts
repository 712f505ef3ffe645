import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import { ListenerSql } from "../Database/Sql.ts"
import { RunSlotsRepo, runSignalsChannel } from "./RunSlotsRepo.ts"

export type RunSignal = "granted" | "cancelled"

// A cancel heard is remembered this long, so that a step that starts after
// the signal went by (on this node) is stopped before its model call.
const rememberCancelled = Duration.minutes(10)
const rememberedAtMost = 10_000

/**
 * Signals about runs, across the cluster, through one LISTEN per node on
 * `run_signals`: a slot granted to a waiting run (RunSlots), and a run
 * cancelled. A cancel interrupts, on whichever node runs them, the parts of
 * the run wrapped in `cancellable` (its model calls): effect's workflow
 * interrupt only takes effect when a run would suspend, so without this an
 * activity's provider call stayed open until MODEL_TIMEOUT. Interrupting the
 * call aborts its HTTP request (effect's client aborts on interruption).
 */
export class RunSignals extends Context.Service<
  RunSignals,
  {
    /** Tells every node (this one at once) that the run was cancelled. */
    readonly cancel: (runId: string) => Effect.Effect<void>
    /**
     * Runs `effect` until the run is cancelled: then it is interrupted and
     * fails with `onCancel()`. A run cancelled already fails at once.
     */
    readonly cancellable: <E2>(
      runId: string,
      onCancel: () => E2
    ) => <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | E2, R>
    /**
     * Watches the run's signals for the scope: `next` waits for one heard
     * since the last `next` (or since the watch began), at most `timeout`.
     */
    readonly watch: (runId: string) => Effect.Effect<
      {
        readonly next: (timeout: Duration.Input) => Effect.Effect<void>
      },
      never,
      Scope.Scope
    >
    /** Whether this node heard of the run's cancel. */
    readonly isCancelled: (runId: string) => boolean
  }
>()("agent-host/RunSignals") {
  static readonly layer = Layer.effect(
    RunSignals,
    Effect.gen(function* () {
      const repo = yield* RunSlotsRepo
      const listener = yield* ListenerSql
      const waiting = new Map<string, Set<(signal: RunSignal) => void>>()
      // Insertion order is the order heard: the oldest leave first.
      const cancelled = new Map<string, number>()

      const isCancelled = (runId: string) => {
        const until = cancelled.get(runId)
        return until !== undefined && until > Date.now()
      }

      const deliver = (signal: RunSignal, runId: string) => {
        if (signal === "cancelled") {
          cancelled.delete(runId)
          cancelled.set(runId, Date.now() + Duration.toMillis(rememberCancelled))
          while (cancelled.size > rememberedAtMost) cancelled.delete(cancelled.keys().next().value!)
        }
        const callbacks = waiting.get(runId)
        if (callbacks !== undefined) for (const callback of [...callbacks]) callback(signal)
      }

      const on = (runId: string, callback: (signal: RunSignal) => void) =>
        Effect.acquireRelease(
          Effect.sync(() => {
            let callbacks = waiting.get(runId)
            if (callbacks === undefined) {
              callbacks = new Set()
              waiting.set(runId, callbacks)
            }
            callbacks.add(callback)
          }),
          () =>
            Effect.sync(() => {
              const callbacks = waiting.get(runId)
              callbacks?.delete(callback)
              if (callbacks?.size === 0) waiting.delete(runId)
            })
        )

      yield* Effect.gen(function* () {
        const signals = yield* listener.listen(runSignalsChannel)
        while (true) {
          const { payload } = yield* Queue.take(signals)
          const colon = payload.indexOf(":")
          const kind = payload.slice(0, colon)
          if (kind === "granted" || kind === "cancelled") deliver(kind, payload.slice(colon + 1))
        }
      }).pipe(
        Effect.scoped,
        Effect.tapCause((cause) => Effect.logWarning("Run signal listener lost; reconnecting", cause)),
        Effect.retry(Schedule.spaced("1 second")),
        Effect.forkScoped
      )

      const cancel = (runId: string) =>
        Effect.andThen(
          Effect.sync(() => deliver("cancelled", runId)),
          repo
            .signalCancelled(runId)
            .pipe(
              Effect.catchCause((cause) => Effect.logWarning("Could not signal a cancel to the other nodes", cause))
            )
        )

      const cancellable =
        <E2>(runId: string, onCancel: () => E2) =>
        <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | E2, R> =>
          Effect.suspend(() => {
            if (isCancelled(runId)) return Effect.fail(onCancel())
            const heard = Deferred.makeUnsafe<void>()
            return Effect.scoped(
              Effect.andThen(
                on(runId, (signal) => {
                  if (signal === "cancelled") Deferred.doneUnsafe(heard, Exit.void)
                }),
                // The call runs interruptibly even inside an activity (which the
                // cluster runs uninterruptibly): only the cancel interrupts it.
                Effect.raceFirst(
                  Effect.interruptible(effect),
                  Effect.andThen(
                    Deferred.await(heard),
                    Effect.suspend(() => Effect.fail(onCancel()))
                  )
                )
              )
            )
          })

      const watch = (runId: string) =>
        Effect.gen(function* () {
          let heard = Deferred.makeUnsafe<void>()
          yield* on(runId, () => Deferred.doneUnsafe(heard, Exit.void))
          return {
            next: (timeout: Duration.Input) =>
              Deferred.await(heard).pipe(
                Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.void }),
                Effect.ensuring(
                  Effect.sync(() => {
                    heard = Deferred.makeUnsafe<void>()
                  })
                )
              )
          }
        })

      return RunSignals.of({ cancel, cancellable, watch, isCancelled })
    })
  )
}
