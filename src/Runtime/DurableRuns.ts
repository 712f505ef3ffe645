import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Schedule from "effect/Schedule"
import * as Singleton from "effect/cluster/Singleton"
import { Metrics } from "../Observability/Observability.ts"

// The machinery every durable run shares (executions, team runs): a run is a
// row of its feature's read model plus a workflow of effect's cluster. The
// row is committed first; the workflow is started after, and sweeps make
// sure that every stored run starts, ends, and leaves no stored messages
// behind once finished.

const startTakenWithin = Duration.minutes(1)

/**
 * Stores a run with `insert` and, when the row is new, starts its workflow on
 * a fiber of its own, so that the start goes out even if the caller hangs up
 * or its answer gives up waiting (the two are not interrupted in between; a
 * run stored without its start, a crash in between, is started by the
 * sweeps). The answer then waits at most `timeout` for the start; past it,
 * or when the start fails, it fails with `notStarted(id)`: the run is stored,
 * so the client polls it instead of starting it again.
 *
 * A row that was not new (an idempotency key replayed) is returned as it is,
 * with `fresh` false, for the caller to answer as a replay.
 */
export const startStored = <
  C extends { readonly id: string; readonly fresh: boolean; readonly started?: boolean },
  E,
  R,
  N
>(options: {
  readonly insert: Effect.Effect<C, E, R>
  readonly start: (id: string) => Effect.Effect<void, unknown>
  /** Has this node read the start requests stored with their rows (`started`, ClusterTables.startMessage). */
  readonly poll?: Effect.Effect<void> | undefined
  readonly timeout: Duration.Input
  readonly notStarted: (id: string) => N
  /** For the logs: "An execution", "A team run". */
  readonly what: string
  /** The workflow's name, for `workflow_starts_total`. */
  readonly workflow: string
}): Effect.Effect<C, E | N, R> =>
  Effect.gen(function* () {
    const { claimed, starting } = yield* Effect.uninterruptible(
      Effect.gen(function* () {
        const claimed = yield* options.insert
        if (claimed.fresh) {
          yield* Metric.update(
            Metrics.workflowStarts(options.workflow, claimed.started === true ? "with_row" : "by_client"),
            1
          )
        }
        if (claimed.started === true && options.poll !== undefined) {
          yield* options.poll
          return { claimed, starting: undefined }
        }
        // The workflow's start message is stored by the cluster before this completes.
        const starting = claimed.fresh
          ? yield* Effect.forkDetach(
              options.start(claimed.id).pipe(
                Effect.timeoutOrElse({
                  duration: startTakenWithin,
                  orElse: () =>
                    Effect.logWarning(`${options.what}'s start was not taken within a minute; the sweeps will start it`)
                })
              )
            )
          : undefined
        return { claimed, starting }
      })
    )
    if (starting === undefined) return claimed
    // Made only when needed: an error captures its stack when made.
    const notStarted = () => options.notStarted(claimed.id)
    yield* Fiber.join(starting).pipe(
      Effect.timeoutOrElse({ duration: options.timeout, orElse: () => Effect.fail(notStarted()) }),
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? // The answer itself was interrupted (the client went away).
            Effect.failCause(cause as Cause.Cause<never>)
          : Effect.andThen(
              Effect.logWarning(`${options.what}'s start failed; the sweeps will start it`, cause).pipe(
                Effect.annotateLogs({ runId: claimed.id })
              ),
              Effect.fail(notStarted())
            )
      )
    )
    return claimed
  })

/** What the sweeps of one kind of durable run need from its feature. */
export interface Sweeps {
  /** Ids of every unfinished run. */
  readonly unfinished: Effect.Effect<ReadonlyArray<string>>
  /** Ids of the `limit` oldest runs accepted more than `seconds` ago and not started yet. */
  readonly notStarted: (seconds: number, limit: number) => Effect.Effect<ReadonlyArray<string>>
  /** Starts a run's workflow (idempotent: a running workflow is left alone). */
  readonly start: (id: string) => Effect.Effect<void, unknown>
  /** Fails the runs far past their timeout, whatever became of their workflows. */
  readonly reap: Effect.Effect<void>
  /** Finished runs whose workflows' messages are still stored past their retention, oldest first. */
  readonly unpruned: (limit: number) => Effect.Effect<ReadonlyArray<string>>
  /** Deletes the stored messages of these finished runs' workflows and marks them pruned. */
  readonly prune: (ids: ReadonlyArray<string>) => Effect.Effect<void>
}

/** Starts what is unfinished (idempotent: a running workflow is left alone). */
export const sweep = (sweeps: Sweeps) =>
  Effect.flatMap(sweeps.unfinished, (ids) => Effect.forEach(ids, sweeps.start, { discard: true }))

/** How many runs one nudge starts again at most (every 5 s). */
export const nudgeLimit = 200

/**
 * Under overload a stored start can sit unread for a while; a start sent
 * again is a no-op for a run that exists, and wakes one that waits. The
 * oldest `nudgeLimit` at a time: under a backlog of thousands of accepted
 * runs, sending every one of them again every 5 s added a fifth to the
 * cluster's writes per run, to the node that was already behind (the
 * minute's sweep still starts every unfinished run again).
 */
export const nudge = (sweeps: Sweeps, what: string) =>
  Effect.gen(function* () {
    const ids = yield* sweeps.notStarted(10, nudgeLimit)
    if (ids.length === 0) return
    yield* Effect.logWarning(`${what} accepted over 10 s ago have not started; starting them again`).pipe(
      Effect.annotateLogs({ count: ids.length })
    )
    yield* Effect.forEach(ids, sweeps.start, { discard: true })
  })

/**
 * The cluster keeps every stored message of a workflow after it ends; the
 * read model has what clients need, so those of finished runs are deleted, a
 * batch at a time. Returns how many runs were pruned.
 */
export const prune = (sweeps: Sweeps) =>
  Effect.gen(function* () {
    let pruned = 0
    for (let batch = 0; batch < 20; batch++) {
      const ids = yield* sweeps.unpruned(500)
      if (ids.length === 0) break
      yield* sweeps.prune(ids)
      pruned += ids.length
      if (ids.length < 500) break
    }
    return pruned
  })

/**
 * The sweeper of one kind of durable run, a cluster singleton (one node
 * sweeps; another takes over if it stops): at start, runs past their timeout
 * are failed first; then, and every minute, unfinished runs are (re)started and finished ones' stored messages pruned;
 * every 5 s, runs accepted over 10 s ago and not started yet are started
 * again, and runs past their timeout failed.
 */
export const sweeper = <R>(name: string, what: string, make: Effect.Effect<Sweeps, never, R>) =>
  Singleton.make(
    name,
    Effect.gen(function* () {
      const sweeps = yield* make
      // Runs past their timeout are failed before anything is started again: a run that brought its node
      // down (a poison document) is not resumed by the restart it caused.
      yield* sweeps.reap.pipe(Effect.catchCause((cause) => Effect.logWarning(`${what}: timeout sweep failed`, cause)))
      yield* nudge(sweeps, what).pipe(
        Effect.delay("5 seconds"),
        Effect.catchCause((cause) => Effect.logWarning(`${what}: nudge failed`, cause)),
        Effect.forever,
        Effect.forkScoped
      )
      yield* sweeps.reap.pipe(
        Effect.catchCause((cause) => Effect.logWarning(`${what}: timeout sweep failed`, cause)),
        Effect.delay("5 seconds"),
        Effect.forever,
        Effect.forkScoped
      )
      yield* sweep(sweeps).pipe(
        Effect.andThen(prune(sweeps)),
        Effect.catchCause((cause) => Effect.logWarning(`${what}: sweep failed`, cause)),
        Effect.repeat(Schedule.spaced("1 minute"))
      )
    })
  )
