import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Sharding from "effect/cluster/Sharding"
import * as WorkflowEngine from "effect/workflow/WorkflowEngine"
import * as Crypto from "node:crypto"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import * as ClusterStorage from "../Runtime/ClusterStorage.ts"
import * as DurableRuns from "../Runtime/DurableRuns.ts"
import { EventStreams } from "../Http/EventStreams.ts"
import { Metrics } from "../Observability/Observability.ts"
import { RunSignals } from "../Runtime/RunSignals.ts"
import { refuseRunning, RunSlots } from "../Runtime/RunSlots.ts"
import { decodeCursor } from "../Domain/Cursor.ts"
import { isId, newId, type OrchestrationId, type TenantId } from "../Domain/Ids.ts"
import { BadRequest, Conflict, NotFound } from "../Domain/Problems.ts"
import { defaultPageSize } from "../Domain/Page.ts"
import { type ExecuteRequest, type Execution, ExecutionNotStarted, type ExecutionStatus } from "./Api.ts"
import { ExecutionWorkflow } from "./ExecutionWorkflow.ts"
import { Orchestrations, variablesUsed } from "./Orchestrations.ts"
import { ExecutionsRepo } from "./ExecutionsRepo.ts"
import * as Traced from "../Observability/Traced.ts"

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
  Crypto.createHash("sha256")
    .update(
      JSON.stringify([
        orchestrationId,
        request.input,
        Object.entries(request.variables ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      ])
    )
    .digest("hex")

/** Starting, reading, listing and cancelling executions. */
export class Executions extends Context.Service<Executions>()("agent-host/Executions", {
  make: Effect.gen(function* () {
    const orchestrations = yield* Orchestrations
    const repo = yield* ExecutionsRepo
    // The engine alone is provided to the workflow calls below: providing the
    // context this service was built in copied its 20-odd services into the
    // request's context on every execute.
    const engine = yield* WorkflowEngine.WorkflowEngine
    const config = yield* AppConfig
    const budget = yield* TokenBudget
    const streams = yield* EventStreams
    const sharding = yield* Sharding.Sharding
    const tables = yield* ClusterStorage.ClusterTables
    const localStart = tables.startMessage(ExecutionWorkflow)
    const runSlots = yield* RunSlots
    const signals = yield* RunSignals

    const startWorkflow = (executionId: string) =>
      ExecutionWorkflow.execute({ executionId }, { discard: true }).pipe(
        Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
        Effect.asVoid
      )

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
      claimed: {
        readonly id: string
        readonly orchestrationId: string
        readonly status: ExecutionStatus
        readonly requestHash: string | null
      },
      hash: string | null
    ) =>
      claimed.requestHash !== hash
        ? Effect.fail(new Conflict({ detail: "This Idempotency-Key was used with a different request" }))
        : Effect.succeed({ executionId: claimed.id, status: claimed.status, orchestrationId: claimed.orchestrationId })

    const start = Traced.fn("Executions.start")(function* (
      tenantId: TenantId,
      orchestrationId: OrchestrationId,
      request: ExecuteRequest,
      idempotencyKey: string | undefined,
      // False (`Prefer: wait=0`): refused with a 429 rather than queued when the tenant's runs are at its cap.
      wait = true
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
      const spent = yield* budget
        .admitWork(tenantId)
        .pipe(Effect.as(undefined), Effect.catchTag("TokenBudgetSpent", Effect.succeed))
      if (spent !== undefined) {
        const earlier = idempotencyKey === undefined ? Option.none() : yield* repo.claimedBy(tenantId, idempotencyKey)
        if (Option.isNone(earlier)) return yield* spent
        return yield* replayOf(earlier.value, requestHash(orchestrationId, request))
      }
      const orchestration = yield* orchestrations.get(tenantId, orchestrationId)
      if (orchestration.status !== "active")
        return yield* new NotFound({ detail: `No active orchestration ${orchestrationId}` })
      const variables = request.variables ?? {}
      const missing = [...variablesUsed(orchestration.steps)].filter((name) => !Object.hasOwn(variables, name))
      if (missing.length > 0) {
        return yield* new BadRequest({
          detail: `Missing variables: ${missing.join(", ")}`,
          errors: missing.map((name) => ({
            path: ["payload", "variables", name],
            message: "Used by the orchestration's prompts"
          }))
        })
      }
      const hash = idempotencyKey === undefined ? null : requestHash(orchestrationId, request)
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
          ? yield* localStart({ executionId: id })
          : undefined
      // A request that would not wait takes its slot before the run is stored
      // (one statement, only then); its workflow finds the slot taken.
      if (!wait) {
        const refused = yield* runSlots.reserve("execution", tenantId, id)
        if (refused !== undefined) return yield* refuseRunning(refused.refusedAt)
      }
      const claimed = yield* DurableRuns.startStored({
        insert: repo.insert({
          id,
          tenantId,
          orchestrationId,
          input: request.input,
          variables,
          steps: orchestration.steps,
          timeoutMs: orchestration.timeoutMs,
          idempotencyKey: idempotencyKey ?? null,
          requestHash: hash,
          startRequest
        }),
        start: startWorkflow,
        poll: sharding.pollStorage,
        workflow: ExecutionWorkflow._tag,
        timeout: config.clusterCallTimeout,
        notStarted: (executionId) =>
          new ExecutionNotStarted({ detail: "The execution is stored and will start shortly", executionId }),
        what: "An execution"
      })
      if (!claimed.fresh) {
        if (!wait) yield* runSlots.release(id)
        return yield* replayOf(claimed, hash)
      }
      return { executionId: claimed.id, status: "pending" as const, orchestrationId: claimed.orchestrationId }
    })

    const find = (tenantId: TenantId, id: string) =>
      Effect.flatMap(repo.get(tenantId, id), (execution) =>
        Option.isNone(execution)
          ? Effect.fail(new NotFound({ detail: `No execution ${id}` }))
          : Effect.succeed(execution.value)
      )

    // Pending executions that wait for a slot say so (one statement, only when some are pending).
    const withWaiting = (tenantId: TenantId, executions: ReadonlyArray<Execution>) =>
      Effect.map(
        runSlots.waiting(
          tenantId,
          executions.filter((execution) => execution.status === "pending").map((execution) => execution.id)
        ),
        (waiting) =>
          executions.map((execution): Execution => {
            const queued = waiting.get(execution.id)
            return queued === undefined
              ? execution
              : { ...execution, waiting: { reason: "tenant_concurrency", ahead: queued.ahead, limit: queued.limit } }
          })
      )

    const get = Traced.fn("Executions.get")(function* (tenantId: TenantId, id: string) {
      const execution = yield* find(tenantId, id)
      return (yield* withWaiting(tenantId, [execution]))[0]!
    })

    const list = Traced.fn("Executions.list")(function* (
      tenantId: TenantId,
      query: {
        readonly limit?: number | undefined
        readonly cursor?: string | undefined
        readonly orchestrationId?: string | undefined
        readonly status?: ExecutionStatus | undefined
      }
    ) {
      const before = yield* decodeCursor(query.cursor, isId)
      const limit = query.limit ?? defaultPageSize
      const page = yield* repo.page(tenantId, {
        orchestrationId: query.orchestrationId ?? null,
        status: query.status ?? null,
        before,
        limit
      })
      return { ...page, data: yield* withWaiting(tenantId, page.data) }
    })

    const cancel = Traced.fn("Executions.cancel")(function* (tenantId: TenantId, id: string) {
      const execution = yield* find(tenantId, id)
      if (isFinal(execution.status)) {
        return yield* new Conflict({ detail: `The execution is already ${execution.status}` })
      }
      const cancelled = yield* repo.transition(id, "cancelled", { error: "Cancelled" }).pipe(Effect.orDie)
      if (!cancelled) return yield* new Conflict({ detail: "The execution has just finished" })
      yield* Metric.update(Metrics.executions("cancelled"), 1)
      // Whichever node runs its steps aborts their model calls now; a run
      // waiting for a slot leaves the queue (effect's interrupt below only
      // takes effect when the workflow next suspends).
      yield* signals.cancel(id)
      // Running steps are interrupted; the read model already says cancelled.
      yield* Effect.flatMap(ExecutionWorkflow.executionId({ executionId: id }), (workflowId) =>
        ExecutionWorkflow.interrupt(workflowId)
      ).pipe(
        Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
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

    /**
     * The execution's events as they happen: what is logged already, then
     * what follows (woken by its notifications), until the final event. Resumes after
     * `lastEventId` when a client reconnects. A stream lasts at most
     * EVENT_STREAM_MAX_DURATION and never past the execution's own timeout
     * (plus a moment for its final event to be written); then it ends with a
     * `stream.end` event saying why.
     */
    const events = Traced.fn("Executions.events")(function* (tenantId: TenantId, id: string, lastEventId: string) {
      const deadline = yield* repo.deadline(tenantId, id)
      if (Option.isNone(deadline)) return yield* new NotFound({ detail: `No execution ${id}` })
      const now = yield* Clock.currentTimeMillis
      const executionEnd = deadline.value + finalEventGraceMs
      const streamEnd = now + Duration.toMillis(config.eventStreamMaxDuration)
      const end: StreamEnd = {
        type: "stream.end",
        reason: executionEnd <= streamEnd ? "executionTimeout" : "maxDuration"
      }

      // One cap for every kind of stream a tenant opens, across the cluster.
      return yield* streams.follow<ExecutionEvent, StreamEnd>(tenantId, {
        runId: id,
        read: (after) => repo.events(id, after),
        // ExecutionsRepo.events reads at most 500.
        pageSize: 500,
        isFinal: (type) => finalEvents.has(type),
        lastEventId,
        now,
        endsAt: Math.min(executionEnd, streamEnd),
        end
      })
    })

    // The cluster's stored messages of executions finished over
    // EXECUTION_MESSAGES_RETENTION ago are deleted by the sweeps.
    const sweeps = (reap: Effect.Effect<void>): DurableRuns.Sweeps => ({
      unfinished: repo.unfinished,
      // Runs waiting for a slot have started their workflows: not to be nudged.
      notStarted: (seconds, limit) =>
        Effect.flatMap(repo.notStarted(seconds, limit), (ids) =>
          Effect.map(runSlots.queuedAmong(ids), (queued) => ids.filter((id) => !queued.has(id)))
        ),
      start: startWorkflow,
      reap,
      unpruned: (limit) => repo.unpruned(Duration.toSeconds(config.executionMessagesRetention), limit),
      prune: (ids) =>
        Effect.flatMap(
          Effect.forEach(ids, (executionId) => ExecutionWorkflow.executionId({ executionId })),
          (entityIds) => Effect.orDie(tables.pruneMessages(ExecutionWorkflow, entityIds, repo.markPruned(ids)))
        )
    })

    // An execution's timeout holds whatever became of its workflow (its node
    // died, it crashed, the database failed under it): past created_at +
    // timeoutMs (and a few seconds for a live run to record its own timeout)
    // it is failed here, and its workflow, if any, interrupted.
    const reap = Effect.gen(function* () {
      const ids = yield* repo.failTimedOut(5)
      if (ids.length === 0) return
      yield* Effect.logWarning("Executions past their timeout failed by the sweep").pipe(
        Effect.annotateLogs({ count: ids.length })
      )
      yield* Metric.update(Metrics.executions("failed"), ids.length)
      // Their model calls in flight stop, and those waiting for a slot leave the queue.
      yield* Effect.forEach(ids, signals.cancel, { discard: true })
      yield* Effect.forEach(
        ids,
        (executionId) =>
          Effect.flatMap(ExecutionWorkflow.executionId({ executionId }), (workflowId) =>
            ExecutionWorkflow.interrupt(workflowId)
          ).pipe(
            Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
            Effect.timeout(config.clusterCallTimeout),
            Effect.ignore
          ),
        { discard: true, concurrency: 10 }
      )
    })

    const durable = sweeps(reap)
    return {
      start,
      get,
      list,
      cancel,
      events,
      sweeps: durable,
      sweep: DurableRuns.sweep(durable),
      nudge: DurableRuns.nudge(durable, "Executions"),
      reap,
      prune: DurableRuns.prune(durable)
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([Orchestrations.layer, ExecutionsRepo.layer, TokenBudget.layer, EventStreams.layer])
  )

  /** The sweeps of executions (DurableRuns.sweeper), a cluster singleton. */
  static readonly sweeper = DurableRuns.sweeper(
    "ExecutionsSweep",
    "Executions",
    Effect.gen(function* () {
      return (yield* Executions).sweeps
    })
  )
}
