import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Sharding from "effect/cluster/Sharding"
import * as Singleton from "effect/cluster/Singleton"
import type * as Workflow from "effect/workflow/Workflow"
import * as WorkflowEngine from "effect/workflow/WorkflowEngine"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import { newId, type TenantId } from "../Domain/Ids.ts"
import { Conflict } from "../Domain/Problems.ts"
import { asksNotToWait, type RunWaiting } from "../Domain/RunQueue.ts"
import { EventStreams } from "../Http/EventStreams.ts"
import { Metrics } from "../Observability/Observability.ts"
import { ClusterTables, type StartMessage } from "./ClusterStorage.ts"
import { RunSignals } from "./RunSignals.ts"
import { refuseRunning, RunSlots } from "./RunSlots.ts"
import type { RunKind } from "./RunSlotsRepo.ts"
import { ToolCallsRepo } from "../Tools/CallsRepo.ts"

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

// ---------------------------------------------------------------------------
// A kind of run, as its feature drives it
// ---------------------------------------------------------------------------

/** A run's workflow: its payload names the run by its id alone. */
export interface RunWorkflow<Payload> extends Workflow.Any {
  readonly execute: (
    payload: Payload,
    options: { readonly discard: true }
  ) => Effect.Effect<string, never, WorkflowEngine.WorkflowEngine>
  readonly executionId: (payload: Payload) => Effect.Effect<string>
  readonly interrupt: (executionId: string) => Effect.Effect<void, never, WorkflowEngine.WorkflowEngine>
}

/**
 * The calls of a run's workflow by run id, on this node's engine: only the
 * engine is provided to them, since providing the context the feature's
 * service was built in copied its 20-odd services into the request's
 * context on every start.
 */
export const workflowCalls = <Payload>(workflow: RunWorkflow<Payload>, payload: (id: string) => Payload) =>
  Effect.gen(function* () {
    const engine = yield* WorkflowEngine.WorkflowEngine
    const tables = yield* ClusterTables
    const onEngine = Effect.provideService(WorkflowEngine.WorkflowEngine, engine)
    return {
      /** Starts the run's workflow (idempotent: a running workflow is left alone). */
      start: (id: string): Effect.Effect<void> =>
        workflow.execute(payload(id), { discard: true }).pipe(onEngine, Effect.asVoid),
      // `interrupt` is a method of the workflow (it reads `this`): called on it, never passed on bare.
      interrupt: (id: string): Effect.Effect<void> =>
        Effect.flatMap(workflow.executionId(payload(id)), (executionId) => workflow.interrupt(executionId)).pipe(
          onEngine
        ),
      /** Deletes the stored messages of these finished runs' workflows, then runs `mark`. */
      prune: <E, R>(ids: ReadonlyArray<string>, mark: Effect.Effect<unknown, E, R>) =>
        Effect.flatMap(
          Effect.forEach(ids, (id) => workflow.executionId(payload(id))),
          (entityIds) => Effect.orDie(tables.pruneMessages(workflow, entityIds, mark))
        )
    }
  })

/** Whether a run's status is final (executions and team runs say it the same way). */
export const isFinal = (status: string) => status === "completed" || status === "failed" || status === "cancelled"

/** What an idempotency key claims or finds of a run. */
export interface Claim {
  readonly id: string
  readonly status: string
  readonly requestHash: string | null
}

/** What the runs of a kind need from their feature's read model (its Repo). */
export interface RunsRepo<C extends Claim, Event extends { readonly id: string; readonly type: string }> {
  /** The run an idempotency key already names. */
  readonly claimedBy: (tenantId: TenantId, idempotencyKey: string) => Effect.Effect<Option.Option<C>>
  readonly unfinished: Sweeps["unfinished"]
  readonly notStarted: Sweeps["notStarted"]
  /** Finished runs whose workflows' messages are still stored `seconds` after they finished, oldest first. */
  readonly unpruned: (seconds: number, limit: number) => Effect.Effect<ReadonlyArray<string>>
  readonly markPruned: (ids: ReadonlyArray<string>) => Effect.Effect<unknown>
  /** A run's events after an id, oldest first, at most `eventsPageSize` of them. */
  readonly events: (runId: string, afterId: string) => Effect.Effect<ReadonlyArray<Event>>
}

/** The headers of a request that starts a run. */
export interface StartHeaders {
  readonly "idempotency-key"?: string | undefined
  /** `wait=0` refuses the run with a 429 rather than queue it when the tenant's runs are at its plan's cap. */
  readonly prefer?: string | undefined
}

/** A request that starts a run: its body and its headers. */
export interface StartRequest<Payload> {
  readonly payload: Payload
  readonly headers: StartHeaders
}

/** The columns every kind of run stores with its own, as `accept` gives them to the feature's insert. */
export interface NewRun {
  readonly id: string
  readonly tenantId: TenantId
  readonly idempotencyKey: string | null
  readonly requestHash: string | null
  /** The workflow's start request (ClusterTables.startMessage), stored with the row when given. */
  readonly startRequest: StartMessage | undefined
}

/**
 * What the runs of one kind that tenants start and wait for (executions, team
 * runs) share, from their acceptance to their sweeps: made in the feature's
 * service, from its workflow and read model.
 */
export const runsOf = <
  Payload,
  C extends Claim,
  Event extends { readonly id: string; readonly type: string },
  A,
  N
>(kind: {
  /** The 503 of a run stored whose start is not confirmed in time. */
  readonly notStarted: (id: string) => N
  readonly workflow: RunWorkflow<Payload>
  readonly payload: (id: string) => Payload
  /** Its run slots' kind. */
  readonly slots: RunKind
  /** For the logs: "An execution", "A team run". */
  readonly what: string
  /** The answer that accepts a run, in the status given. */
  readonly answer: (claimed: C, status: C["status"]) => A
  /** The events after which a run's event stream ends. */
  readonly finalEvents: ReadonlyArray<string>
  readonly repo: RunsRepo<C, Event>
  readonly eventsPageSize: number
  /** How long the cluster's stored messages of a finished run are kept before the sweeps delete them. */
  readonly retention: (config: AppConfig["Service"]) => Duration.Duration
}) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const budget = yield* TokenBudget
    const streams = yield* EventStreams
    const sharding = yield* Sharding.Sharding
    const localStart = (yield* ClusterTables).startMessage(kind.workflow)
    const runSlots = yield* RunSlots
    const signals = yield* RunSignals
    const calls = yield* workflowCalls(kind.workflow, kind.payload)
    const toolCalls = yield* ToolCallsRepo
    const { repo } = kind
    const finalEvents: ReadonlySet<string> = new Set(kind.finalEvents)

    // An Idempotency-Key that names a run already accepted: that run where it is now, or a 409 for another request.
    const replayOf = (claimed: C, hash: string | null) =>
      claimed.requestHash !== hash
        ? Effect.fail(new Conflict({ detail: "This Idempotency-Key was used with a different request" }))
        : Effect.succeed(kind.answer(claimed, claimed.status))

    /**
     * Accepts a run once the feature has checked the request: the tenant's
     * token budget first (a spent one refuses a new run up front, each step
     * of it checks again, but not the replay of one accepted before, which
     * answers as any replay does), then `prepare` (what the feature reads to
     * store the run, which gives its insert), then the run stored with its
     * workflow's start (startStored). `hash` identifies the request for its
     * Idempotency-Key, when it has one.
     */
    const accept = <EP, RP, EI, RI>(
      tenantId: TenantId,
      headers: StartHeaders,
      request: {
        readonly hash: () => string
        readonly prepare: Effect.Effect<
          (run: NewRun) => Effect.Effect<C & { readonly fresh: boolean; readonly started?: boolean }, EI, RI>,
          EP,
          RP
        >
      }
    ) =>
      Effect.gen(function* () {
        const idempotencyKey = headers["idempotency-key"]
        const hash = idempotencyKey === undefined ? null : request.hash()
        const spent = yield* budget
          .admitWork(tenantId)
          .pipe(Effect.as(undefined), Effect.catchTag("TokenBudgetSpent", Effect.succeed))
        if (spent !== undefined) {
          const earlier = idempotencyKey === undefined ? Option.none() : yield* repo.claimedBy(tenantId, idempotencyKey)
          if (Option.isNone(earlier)) return yield* spent
          return yield* replayOf(earlier.value, hash)
        }
        const insert = yield* request.prepare
        const id = newId()
        // Without a key, a run this node will run is stored with its workflow's
        // start request, in one statement: the start is committed with the row,
        // and no hand-over to the cluster is waited for. A keyed request is
        // claimed in a transaction of its own, and a run of another node's
        // shard is started by the cluster's client, after the row is stored.
        // So is every run when CLUSTER_CALL_TIMEOUT is zero (no time given to
        // the hand-over: each answer is the 503 that says the run is stored and
        // will start shortly).
        const startRequest =
          idempotencyKey === undefined && Duration.isGreaterThan(config.clusterCallTimeout, Duration.zero)
            ? yield* localStart(kind.payload(id))
            : undefined
        // A request that would not wait takes its slot before the run is stored
        // (one statement, only then); its workflow finds the slot taken.
        const wait = !asksNotToWait(headers.prefer)
        if (!wait) {
          const refused = yield* runSlots.reserve(kind.slots, tenantId, id)
          if (refused !== undefined) return yield* refuseRunning(refused.refusedAt)
        }
        const claimed = yield* startStored({
          insert: insert({ id, tenantId, idempotencyKey: idempotencyKey ?? null, requestHash: hash, startRequest }),
          start: calls.start,
          poll: sharding.pollStorage,
          workflow: kind.workflow._tag,
          timeout: config.clusterCallTimeout,
          notStarted: kind.notStarted,
          what: kind.what
        })
        if (!claimed.fresh) {
          if (!wait) yield* runSlots.release(id)
          return yield* replayOf(claimed, hash)
        }
        return kind.answer(claimed, "pending")
      })

    /** The runs among these that wait for a slot say so (one statement, only when some are pending). */
    const withWaiting = <R extends { readonly status: string; readonly waiting?: RunWaiting }>(
      tenantId: TenantId,
      runs: ReadonlyArray<R>,
      idOf: (run: R) => string
    ) =>
      Effect.map(runSlots.waiting(tenantId, runs.filter((run) => run.status === "pending").map(idOf)), (waiting) =>
        runs.map((run): R => {
          const queued = waiting.get(idOf(run))
          return queued === undefined
            ? run
            : { ...run, waiting: { reason: "tenant_concurrency", ahead: queued.ahead, limit: queued.limit } }
        })
      )

    /**
     * After a run is marked cancelled: whichever node runs it aborts its model
     * calls now, a run waiting for a slot leaves the queue (effect's interrupt
     * only takes effect when the workflow next suspends), and the workflow is
     * interrupted. The read model says cancelled for good (nothing moves a run
     * out of a final state); a workflow that cannot be reached in time only
     * runs what is in flight to its end, with no effect on the result.
     */
    const stop = (id: string) =>
      Effect.andThen(
        signals.cancel(id),
        calls.interrupt(id).pipe(
          Effect.timeoutOrElse({
            duration: config.clusterCallTimeout,
            orElse: () =>
              Effect.logWarning(`Cancel: ${kind.what.toLowerCase()} could not be interrupted in time`, { runId: id })
          })
        )
      )

    /**
     * A run's events as they happen (EventStreams.follow): what is logged
     * already after `lastEventId`, then what follows (woken by its
     * notifications), until its final event; for at most
     * EVENT_STREAM_MAX_DURATION and never past `end.at`, the run's own
     * deadline and a moment for its final event. A stream that runs out of
     * time ends with a `stream.end` event saying why (`end.reason` for the
     * run's deadline).
     */
    const follow = <Reason extends string>(
      tenantId: TenantId,
      runId: string,
      lastEventId: string,
      end: { readonly at: number; readonly reason: Reason }
    ) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const streamEnd = now + Duration.toMillis(config.eventStreamMaxDuration)
        // One cap for every kind of stream a tenant opens, across the cluster.
        return yield* streams.follow(tenantId, {
          runId,
          read: (afterId) => repo.events(runId, afterId),
          pageSize: kind.eventsPageSize,
          isFinal: (type) => finalEvents.has(type),
          lastEventId,
          now,
          endsAt: Math.min(end.at, streamEnd),
          end: { type: "stream.end" as const, reason: end.at <= streamEnd ? end.reason : ("maxDuration" as const) }
        })
      })

    /**
     * The sweeps of this kind of run (`sweeper`), given how runs past their
     * timeout are failed: those `reap` returns are then stopped (their model
     * calls in flight, their places in the queue, their workflows).
     */
    const sweeps = (reap: Effect.Effect<ReadonlyArray<string>>): Sweeps => ({
      unfinished: repo.unfinished,
      // Runs waiting for a slot have started their workflows: not to be nudged.
      notStarted: (seconds, limit) =>
        Effect.flatMap(repo.notStarted(seconds, limit), (ids) =>
          Effect.map(runSlots.queuedAmong(ids), (queued) => ids.filter((id) => !queued.has(id)))
        ),
      start: calls.start,
      reap: Effect.flatMap(reap, (ids) =>
        Effect.andThen(
          Effect.forEach(ids, signals.cancel, { discard: true }),
          Effect.forEach(
            ids,
            (id) => calls.interrupt(id).pipe(Effect.timeout(config.clusterCallTimeout), Effect.ignore),
            { discard: true, concurrency: 10 }
          )
        )
      ),
      unpruned: (limit) => repo.unpruned(Duration.toSeconds(kind.retention(config)), limit),
      // The tool loops' kept replies are replay state too: a pruned run is never run again. Its calls' records stay.
      prune: (ids) => calls.prune(ids, Effect.andThen(repo.markPruned(ids), Effect.orDie(toolCalls.forgetTurns(ids))))
    })

    return { accept, withWaiting, stop, follow, sweeps } as const
  })
