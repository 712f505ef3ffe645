import { Cause, Clock, Context, Duration, Effect, Fiber, Layer, Metric, Option, Schedule, Stream } from "effect"
import { Singleton } from "effect/cluster"
import type { WorkflowEngine } from "effect/workflow"
import * as Crypto from "node:crypto"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import { Metrics } from "../Platform/Observability.ts"
import { decodeCursor, pageOf } from "../Domain/Cursor.ts"
import { isId, newId, type OrchestrationId, type TenantId } from "../Domain/Ids.ts"
import { BadRequest, Conflict, NotFound, TooManyStreams } from "../Domain/Problems.ts"
import { defaultPageSize } from "../Agents/Api.ts"
import { type ExecuteRequest, ExecutionNotStarted, type ExecutionStatus } from "./Api.ts"
import { ExecutionWorkflow } from "./ExecutionWorkflow.ts"
import { Orchestrations, variablesUsed } from "./Orchestrations.ts"
import { ExecutionsRepo } from "./Repo.ts"

export interface ExecutionEvent {
  readonly id: string
  readonly type: string
  readonly stepId: string | null
  readonly data: unknown
  readonly createdAt: Date
}

/** The last event of a stream that ran out of time before the execution finished. */
export interface StreamEnd {
  readonly type: "stream.end"
  readonly reason: "maxDuration" | "executionTimeout"
}

// A run that times out writes its final event just after its deadline.
const finalEventGraceMs = 2_000

const finalEvents = new Set(["execution.completed", "execution.failed", "execution.cancelled"])

const isFinal = (status: ExecutionStatus) => status === "completed" || status === "failed" || status === "cancelled"

// The same request always hashes the same, whatever the order of its variables.
const requestHash = (orchestrationId: string, request: ExecuteRequest) =>
  Crypto.createHash("sha256").update(JSON.stringify([
    orchestrationId,
    request.input,
    Object.entries(request.variables ?? {}).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0)
  ])).digest("hex")

/** Starting, reading, listing and cancelling executions. */
export class Executions extends Context.Service<Executions>()("agent-host/Executions", {
  make: Effect.gen(function*() {
    const orchestrations = yield* Orchestrations
    const repo = yield* ExecutionsRepo
    const engine = yield* Effect.context<WorkflowEngine.WorkflowEngine>()
    const config = yield* AppConfig
    const budget = yield* TokenBudget

    const startWorkflow = (executionId: string) =>
      ExecutionWorkflow.execute({ executionId }, { discard: true }).pipe(Effect.provideContext(engine), Effect.asVoid)

    /** What is over the configured bounds in an execute request, one entry per field. */
    const requestIssues = (request: ExecuteRequest) => {
      const issues: Array<{ path: Array<string>; message: string }> = []
      if (request.input.length > config.maxMessageChars) {
        issues.push({ path: ["payload", "input"], message: `Expected at most ${config.maxMessageChars} characters` })
      }
      const entries = Object.entries(request.variables ?? {})
      if (entries.length > config.maxVariables) {
        issues.push({
          path: ["payload", "variables"],
          message: `Expected at most ${config.maxVariables} variables (MAX_VARIABLES)`
        })
      }
      for (const [name, value] of entries) {
        if (name.length > config.maxVariableNameChars) {
          // The path names the variable, shortened: the name is the problem.
          issues.push({
            path: ["payload", "variables", `${name.slice(0, config.maxVariableNameChars)}…`],
            message: `Expected a variable name of at most ${config.maxVariableNameChars} characters (MAX_VARIABLE_NAME_CHARS)`
          })
        } else if (value.length > config.maxVariableChars) {
          issues.push({
            path: ["payload", "variables", name],
            message: `Expected at most ${config.maxVariableChars} characters (MAX_VARIABLE_CHARS)`
          })
        }
        if (issues.length >= 20) break
      }
      return issues
    }

    // The answer to a request whose Idempotency-Key names an execution already
    // accepted: that execution where it is now, or a 409 for another request.
    const replayOf = (
      claimed: { readonly id: string; readonly orchestrationId: string; readonly status: ExecutionStatus; readonly requestHash: string | null },
      hash: string | null
    ) =>
      claimed.requestHash !== hash
        ? Effect.fail(new Conflict({ detail: "This Idempotency-Key was used with a different request" }))
        : Effect.succeed({ executionId: claimed.id, status: claimed.status, orchestrationId: claimed.orchestrationId })

    const start = Effect.fn("Executions.start")(function*(
      tenantId: TenantId,
      orchestrationId: OrchestrationId,
      request: ExecuteRequest,
      idempotencyKey: string | undefined
    ) {
      const issues = requestIssues(request)
      if (issues.length > 0) {
        return yield* new BadRequest({
          detail: `${issues[0]!.path.join(".")}: ${issues[0]!.message}${
            issues.length > 1 ? ` (and ${issues.length - 1} more)` : ""
          }`,
          errors: issues
        })
      }
      // A spent token budget refuses a new run up front (each step checks
      // again), but not the replay of one accepted before: that answers as
      // any replay does, with the execution the key names.
      const spent = yield* budget.admitWork(tenantId).pipe(
        Effect.as(undefined),
        Effect.catchTag("TokenBudgetSpent", Effect.succeed)
      )
      if (spent !== undefined) {
        const earlier = idempotencyKey === undefined ? Option.none() : yield* repo.claimedBy(tenantId, idempotencyKey)
        if (Option.isNone(earlier)) return yield* spent
        return yield* replayOf(earlier.value, requestHash(orchestrationId, request))
      }
      const orchestration = yield* orchestrations.get(tenantId, orchestrationId)
      if (orchestration.status !== "active") return yield* new NotFound({ detail: `No active orchestration ${orchestrationId}` })
      const variables = request.variables ?? {}
      const missing = [...variablesUsed(orchestration.steps)].filter((name) => !Object.hasOwn(variables, name))
      if (missing.length > 0) {
        return yield* new BadRequest({
          detail: `Missing variables: ${missing.join(", ")}`,
          errors: missing.map((name) => ({ path: ["payload", "variables", name], message: "Used by the orchestration's prompts" }))
        })
      }
      const hash = idempotencyKey === undefined ? null : requestHash(orchestrationId, request)
      // Once the execution is stored, its start goes out even if the caller
      // hangs up or its answer gives up waiting: the two are not interrupted
      // in between, and the start runs on its own fiber, which the request
      // only waits for.
      const { claimed, starting } = yield* Effect.uninterruptible(Effect.gen(function*() {
        const claimed = yield* repo.insert({
          id: newId(),
          tenantId,
          orchestrationId,
          input: request.input,
          variables,
          steps: orchestration.steps,
          timeoutMs: orchestration.timeoutMs,
          idempotencyKey: idempotencyKey ?? null,
          requestHash: hash
        })
        // The workflow's start message is stored by the cluster before this
        // completes; an execution stored without it (a crash in between) is
        // started by the sweeps below.
        const starting = claimed.fresh
          ? yield* Effect.forkDetach(startWorkflow(claimed.id).pipe(Effect.timeoutOrElse({
            duration: "1 minute",
            orElse: () => Effect.logWarning("An execution's start was not taken within a minute; the sweeps will start it")
          })))
          : undefined
        return { claimed, starting }
      }))
      if (starting === undefined) return yield* replayOf(claimed, hash)
      // The answer waits a bounded time; the start itself goes on regardless.
      // The execution is stored either way, so a 503 names it: the client
      // polls it instead of executing again.
      const notStarted = new ExecutionNotStarted({
        detail: "The execution is stored and will start shortly",
        executionId: claimed.id
      })
      yield* Fiber.join(starting).pipe(
        Effect.timeoutOrElse({ duration: config.clusterCallTimeout, orElse: () => Effect.fail(notStarted) }),
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.failCause(cause)
            : Effect.andThen(
              Effect.logWarning("An execution's start failed; the sweeps will start it", cause).pipe(
                Effect.annotateLogs({ executionId: claimed.id })
              ),
              Effect.fail(notStarted)
            )
        )
      )
      return { executionId: claimed.id, status: "pending" as const, orchestrationId: claimed.orchestrationId }
    })

    const get = Effect.fn("Executions.get")(function*(tenantId: TenantId, id: string) {
      const execution = yield* repo.get(tenantId, id)
      if (Option.isNone(execution)) return yield* new NotFound({ detail: `No execution ${id}` })
      return execution.value
    })

    const list = Effect.fn("Executions.list")(function*(tenantId: TenantId, query: {
      readonly limit?: number | undefined
      readonly cursor?: string | undefined
      readonly orchestrationId?: string | undefined
      readonly status?: ExecutionStatus | undefined
    }) {
      const before = yield* decodeCursor(query.cursor, isId)
      const limit = query.limit ?? defaultPageSize
      const rows = yield* repo.page(tenantId, {
        orchestrationId: query.orchestrationId ?? null,
        status: query.status ?? null,
        before,
        limit: limit + 1
      })
      return pageOf(rows, limit, rows.length > 0 ? rows[0]!.total : 0)
    })

    const cancel = Effect.fn("Executions.cancel")(function*(tenantId: TenantId, id: string) {
      const execution = yield* get(tenantId, id)
      if (isFinal(execution.status)) {
        return yield* new Conflict({ detail: `The execution is already ${execution.status}` })
      }
      const cancelled = yield* repo.transition(id, "cancelled", { error: "Cancelled" }).pipe(Effect.orDie)
      if (!cancelled) return yield* new Conflict({ detail: "The execution has just finished" })
      yield* Metric.update(Metric.withAttributes(Metrics.executions, { status: "cancelled" }), 1)
      // Running steps are interrupted; the read model already says cancelled.
      yield* Effect.flatMap(ExecutionWorkflow.executionId({ executionId: id }), (workflowId) =>
        ExecutionWorkflow.interrupt(workflowId)).pipe(
        Effect.provideContext(engine),
        // The read model says cancelled for good (nothing moves an execution out
        // of a final state); a workflow that cannot be reached in time only
        // runs its steps in flight to their end, with no effect on the result.
        Effect.timeoutOrElse({
          duration: config.clusterCallTimeout,
          orElse: () => Effect.logWarning("Cancel: the workflow could not be interrupted in time", { executionId: id })
        })
      )
      return { executionId: id, status: "cancelled" as const, orchestrationId: execution.orchestrationId }
    })

    // Open event streams by tenant, on this node. Each stream polls Postgres,
    // so a tenant holds at most MAX_EVENT_STREAMS_PER_TENANT of them at once.
    const openStreams = new Map<string, number>()
    const holdStream = (tenantId: TenantId) =>
      Effect.gen(function*() {
        const open = openStreams.get(tenantId) ?? 0
        if (open >= config.maxEventStreamsPerTenant) {
          return yield* new TooManyStreams({
            detail: `At most ${config.maxEventStreamsPerTenant} event streams may be open at once; close one first`,
            limit: config.maxEventStreamsPerTenant
          })
        }
        openStreams.set(tenantId, open + 1)
        // Released with the request's scope: when the stream ends, fails or
        // the client goes away, even before the body started.
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            const left = (openStreams.get(tenantId) ?? 1) - 1
            if (left <= 0) openStreams.delete(tenantId)
            else openStreams.set(tenantId, left)
          })
        )
      })

    /**
     * The execution's events as they happen: what is logged already, then
     * what follows (the log is polled), until the final event. Resumes after
     * `lastEventId` when a client reconnects. A stream lasts at most
     * EVENT_STREAM_MAX_DURATION and never past the execution's own timeout
     * (plus a moment for its final event to be written); then it ends with a
     * `stream.end` event saying why.
     */
    const events = Effect.fn("Executions.events")(function*(tenantId: TenantId, id: string, lastEventId: string) {
      const deadline = yield* repo.deadline(tenantId, id)
      if (Option.isNone(deadline)) return yield* new NotFound({ detail: `No execution ${id}` })
      yield* holdStream(tenantId)
      const now = yield* Clock.currentTimeMillis
      const executionEnd = deadline.value + finalEventGraceMs
      const streamEnd = now + Duration.toMillis(config.eventStreamMaxDuration)
      const end: StreamEnd = {
        type: "stream.end",
        reason: executionEnd <= streamEnd ? "executionTimeout" : "maxDuration"
      }

      // What the client has received: where a last catch-up starts, and whether it is over.
      let delivered = /^\d{1,18}$/.test(lastEventId) ? lastEventId : "0"
      let finished = false
      const live = Stream.paginate(delivered, (after: string) =>
        Effect.gen(function*() {
          const batch: ReadonlyArray<ExecutionEvent> = yield* repo.events(id, after)
          if (batch.length === 0) {
            yield* Effect.sleep("250 millis")
            return [batch, Option.some(after)] as const
          }
          const done = batch.some((event) => finalEvents.has(event.type))
          return [batch, done ? Option.none<string>() : Option.some(batch[batch.length - 1]!.id)] as const
        })).pipe(
          Stream.interruptWhen(Effect.sleep(Duration.millis(Math.max(0, Math.min(executionEnd, streamEnd) - now)))),
          Stream.tap((event) =>
            Effect.sync(() => {
              delivered = event.id
              if (finalEvents.has(event.type)) finished = true
            })
          )
        )
      // Out of time: whatever was logged meanwhile, then `stream.end` unless the run just finished.
      const last = Stream.unwrap(Effect.suspend(() =>
        finished ? Effect.succeed(Stream.empty) : Effect.map(repo.events(id, delivered), (batch) =>
          Stream.fromIterable<ExecutionEvent | StreamEnd>(
            batch.some((event) => finalEvents.has(event.type)) ? batch : [...batch, end]
          ))
      ))
      return Stream.concat<ExecutionEvent | StreamEnd, never, never, ExecutionEvent | StreamEnd, never, never>(live, last)
    })

    /** Starts what is unfinished (idempotent: a running workflow is left alone). */
    const sweep = Effect.flatMap(repo.unfinished, (ids) => Effect.forEach(ids, startWorkflow, { discard: true }))

    // Under overload a stored start can sit unread for a while; a start sent
    // again is a no-op for a run that exists, and wakes one that waits.
    const nudge = Effect.gen(function*() {
      const ids = yield* repo.notStarted(10)
      if (ids.length === 0) return
      yield* Effect.logWarning("Executions accepted over 10 s ago have not started; starting them again").pipe(
        Effect.annotateLogs({ count: ids.length })
      )
      yield* Effect.forEach(ids, startWorkflow, { discard: true })
    })

    // The cluster keeps every stored message of a workflow after it ends;
    // the read model has what clients need, so those of executions finished
    // over EXECUTION_MESSAGES_RETENTION ago are deleted, a batch at a time.
    const entityType = `Workflow/${ExecutionWorkflow._tag}`
    const prune = Effect.gen(function*() {
      const seconds = Duration.toSeconds(config.executionMessagesRetention)
      let pruned = 0
      for (let batch = 0; batch < 20; batch++) {
        const ids = yield* repo.unpruned(seconds, 500)
        if (ids.length === 0) break
        const entityIds = yield* Effect.forEach(ids, (executionId) => ExecutionWorkflow.executionId({ executionId }))
        yield* repo.pruneMessages(ids, entityType, entityIds)
        pruned += ids.length
        if (ids.length < 500) break
      }
      return pruned
    })

    // An execution's timeout holds whatever became of its workflow (its node
    // died, it crashed, the database failed under it): past created_at +
    // timeoutMs (and a few seconds for a live run to record its own timeout)
    // it is failed here, and its workflow, if any, interrupted.
    const reap = Effect.gen(function*() {
      const ids = yield* repo.failTimedOut(5)
      if (ids.length === 0) return
      yield* Effect.logWarning("Executions past their timeout failed by the sweep").pipe(
        Effect.annotateLogs({ count: ids.length })
      )
      yield* Metric.update(Metric.withAttributes(Metrics.executions, { status: "failed" }), ids.length)
      yield* Effect.forEach(ids, (executionId) =>
        Effect.flatMap(ExecutionWorkflow.executionId({ executionId }), (workflowId) =>
          ExecutionWorkflow.interrupt(workflowId)).pipe(
            Effect.provideContext(engine),
            Effect.timeout(config.clusterCallTimeout),
            Effect.ignore
          ), { discard: true, concurrency: 10 })
    })

    return { start, get, list, cancel, events, sweep, nudge, reap, prune } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide([Orchestrations.layer, ExecutionsRepo.layer, TokenBudget.layer]))

  /**
   * At start and then every minute, unfinished executions are (re)started
   * and finished ones' stored workflow messages past their retention deleted;
   * every 5 s, those accepted over 10 s ago and not yet started are, and
   * those past their timeout are failed. A
   * cluster singleton: one node sweeps, and another takes over if it stops.
   */
  static readonly sweeper = Singleton.make(
    "ExecutionsSweep",
    Effect.gen(function*() {
      const executions = yield* Executions
      yield* executions.nudge.pipe(
        Effect.delay("5 seconds"),
        Effect.catchCause((cause) => Effect.logWarning("Execution nudge failed", cause)),
        Effect.forever,
        Effect.forkScoped
      )
      yield* executions.reap.pipe(
        Effect.catchCause((cause) => Effect.logWarning("Execution timeout sweep failed", cause)),
        Effect.delay("5 seconds"),
        Effect.forever,
        Effect.forkScoped
      )
      yield* executions.sweep.pipe(
        Effect.andThen(executions.prune),
        Effect.catchCause((cause) => Effect.logWarning("Execution sweep failed", cause)),
        Effect.repeat(Schedule.spaced("1 minute"))
      )
    })
  )
}
