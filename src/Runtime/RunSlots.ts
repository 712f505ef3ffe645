import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { AppConfig } from "../Config.ts"
import { retryTransient } from "../Database/Errors.ts"
import { TooManyRunningRuns } from "../Domain/Problems.ts"
import { RunSignals } from "./RunSignals.ts"
import { type RunKind, RunSlotsRepo, type SlotStanding, type Waiting } from "./RunSlotsRepo.ts"

export type { RunKind, Waiting } from "./RunSlotsRepo.ts"

// A held slot's lease: its node renews it every third of it while the run
// goes on, so the slots of a node that died come back within this.
const leaseSeconds = 30
const renewEvery = Duration.seconds(leaseSeconds / 3)

/** How long a waiting run sleeps when no signal wakes it before it asks again (lost signals, stale holders). */
export const fallbackPoll = Duration.seconds(5)

/** What a refused request is told to wait, in seconds (Retry-After). */
export const retryAfterSeconds = 5

/** The 429 of a request that asked not to wait, with Retry-After on its response. */
export const refuseRunning = (limit: number) =>
  Effect.withFiber<never, TooManyRunningRuns>((fiber) => {
    // Outside a request (none here) it does nothing.
    HttpEffect.appendPreResponseHandlerUnsafe(fiber.context, (_request, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(retryAfterSeconds)))
    )
    return Effect.fail(
      new TooManyRunningRuns({
        detail:
          `The plan lets ${limit} executions and team runs run at once and they are running; ` +
          "send the request without `Prefer: wait=0` to have it wait its turn",
        limit,
        retryAfter: retryAfterSeconds
      })
    )
  })

/**
 * The fair share of each tenant: executions and team runs running at once,
 * capped by plan (FREE_MAX_RUNNING_RUNS...) across the cluster, in the
 * database (migration 0022). A run's workflow holds a slot while it runs
 * (`hold`); beyond the cap it waits, durably and in the order the runs were
 * accepted, and stays `pending` meanwhile. A slot comes back when its run
 * ends, when its run reaches a final status (a cancel), or when its node stops
 * renewing it; the next waiting run is then woken through `run_signals`, with
 * a poll every few seconds in case a signal was missed.
 */
export class RunSlots extends Context.Service<
  RunSlots,
  {
    /**
     * Runs `effect` (a run's workflow body) holding a slot of its tenant:
     * first waits for one in order, then gives it back when `effect` ends,
     * however it ends. A run already final, or of a plan without a cap, runs
     * `effect` holding nothing.
     */
    readonly hold: (kind: RunKind, runId: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
    /**
     * For a request that would not wait: a slot for the run `runId` about to be
     * stored, taken (or not needed: undefined), or refused at the tenant's cap
     * (`refusedAt`). A slot taken for a run that is then not stored must be `release`d.
     */
    readonly reserve: (
      kind: RunKind,
      tenantId: string,
      runId: string
    ) => Effect.Effect<{ readonly refusedAt: number } | undefined>
    readonly release: (runId: string) => Effect.Effect<void>
    /** Which of these runs of the tenant wait for a slot, by run id. */
    readonly waiting: (tenantId: string, runIds: ReadonlyArray<string>) => Effect.Effect<ReadonlyMap<string, Waiting>>
    /** Those of `runIds` whose workflows hold or wait for a slot (started, so not to be started again). */
    readonly queuedAmong: (runIds: ReadonlyArray<string>) => Effect.Effect<ReadonlySet<string>>
  }
>()("agent-host/RunSlots") {
  static readonly layer = Layer.effect(
    RunSlots,
    Effect.gen(function* () {
      const repo = yield* RunSlotsRepo
      const signals = yield* RunSignals
      const config = yield* AppConfig
      const caps = [config.freeMaxRunningRuns, config.proMaxRunningRuns, config.businessMaxRunningRuns] as const

      // Runs holding a slot at this node: their leases are renewed together.
      const held = new Map<string, number>()
      yield* Effect.suspend(() => (held.size === 0 ? Effect.void : repo.renew([...held.keys()], leaseSeconds))).pipe(
        Effect.catchCause((cause) => Effect.logWarning("Could not renew the leases of run slots", cause)),
        Effect.repeat(Schedule.spaced(renewEvery)),
        Effect.forkScoped
      )

      const acquire = (kind: RunKind, runId: string) =>
        retryTransient(repo.acquire({ kind, runId, caps, leaseSeconds, wait: true })).pipe(
          Effect.map(({ standing }) => standing),
          Effect.orDie
        )

      const release = (runId: string) =>
        retryTransient(repo.release(runId, caps, leaseSeconds), Duration.seconds(10)).pipe(
          Effect.catchCause((cause) =>
            // The slot comes back anyway: its run is final, and its lease runs out.
            Effect.logWarning("Could not give a run slot back; it frees itself shortly", cause)
          )
        )

      // Asks until the run holds a slot (or needs none); in between, sleeps
      // until a signal about the run (a slot granted, a cancel) or the poll.
      const awaitSlot = (kind: RunKind, runId: string) =>
        Effect.scoped(
          Effect.gen(function* () {
            const watched = yield* signals.watch(runId)
            let standing: SlotStanding = yield* acquire(kind, runId)
            if (standing === "waiting") {
              yield* Effect.logInfo("Run waits for a slot of its tenant").pipe(Effect.annotateLogs({ runId, kind }))
            }
            while (standing === "waiting") {
              // Spread, so that the waiting runs of a node do not all ask at once.
              yield* watched.next(Duration.millis(Duration.toMillis(fallbackPoll) * (0.8 + 0.4 * Math.random())))
              standing = yield* acquire(kind, runId)
            }
            return standing
          })
        )

      const hold =
        (kind: RunKind, runId: string) =>
        <A, E, R>(effect: Effect.Effect<A, E, R>) =>
          Effect.flatMap(awaitSlot(kind, runId), (standing) =>
            standing !== "granted"
              ? effect
              : Effect.acquireUseRelease(
                  Effect.sync(() => held.set(runId, (held.get(runId) ?? 0) + 1)),
                  () => effect,
                  () =>
                    Effect.andThen(
                      Effect.sync(() => {
                        const left = (held.get(runId) ?? 1) - 1
                        if (left <= 0) held.delete(runId)
                        else held.set(runId, left)
                      }),
                      release(runId)
                    )
                )
          )

      const reserve = (kind: RunKind, tenantId: string, runId: string) =>
        retryTransient(repo.acquire({ kind, runId, tenantId, caps, leaseSeconds, wait: false })).pipe(
          Effect.orDie,
          Effect.map(({ limit, standing }) => (standing === "refused" ? { refusedAt: limit ?? 0 } : undefined))
        )

      const waiting = (tenantId: string, runIds: ReadonlyArray<string>) =>
        runIds.length === 0
          ? Effect.succeed(new Map<string, Waiting>())
          : repo.waiting(tenantId, runIds, caps).pipe(
              Effect.map((rows) => new Map(rows.map((row) => [row.runId, row]))),
              Effect.orDie
            )

      const queuedAmong = (runIds: ReadonlyArray<string>) =>
        runIds.length === 0 ? Effect.succeed(new Set<string>()) : repo.queuedAmong(runIds).pipe(Effect.orDie)

      return RunSlots.of({ hold, reserve, release, waiting, queuedAmong })
    })
  )

  /** The slots, the signals and their SQL, one of each per process. */
  static readonly layerAll = RunSlots.layer.pipe(
    Layer.provideMerge(RunSignals.layer),
    Layer.provide(RunSlotsRepo.layer)
  )
}
