import { Approvals } from "../Approvals/Approvals.ts"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Crypto from "node:crypto"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import * as DurableRuns from "../Runtime/DurableRuns.ts"
import { EventStreams } from "../Http/EventStreams.ts"
import { Metrics } from "../Observability/Observability.ts"
import { decodeCursor } from "../Domain/Cursor.ts"
import { isId, OrchestrationId, type TenantId } from "../Domain/Ids.ts"
import { BadRequest, Conflict, NotFound } from "../Domain/Problems.ts"
import { defaultPageSize } from "../Domain/Page.ts"
import {
  type ExecuteRequest,
  type Execution,
  ExecutionNotStarted,
  type ExecutionStatus,
  OrchestrationChanged,
  type Step
} from "./Api.ts"
import { ExecutionWorkflow } from "./ExecutionWorkflow.ts"
import { Orchestrations, variablesUsed } from "./Orchestrations.ts"
import { type CarriedStep, ExecutionsRepo } from "./ExecutionsRepo.ts"
import { ToolCallsRepo } from "../Tools/CallsRepo.ts"
import * as Traced from "../Observability/Traced.ts"

// A run that times out writes its final event just after its deadline.
const finalEventGraceMs = 2_000

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

// A retry of an execution is one request whatever is sent with it.
const retryHash = (executionId: string) =>
  Crypto.createHash("sha256")
    .update(JSON.stringify(["retry", executionId]))
    .digest("hex")

/**
 * Why an execution's steps can no longer be retried on its orchestration's
 * current ones (ids and order compared), naming the first step that differs;
 * undefined when they are the same.
 */
export const changedStep = (
  ran: ReadonlyArray<{ readonly id: string }>,
  now: ReadonlyArray<{ readonly id: string }>
): { readonly stepId: string; readonly detail: string } | undefined => {
  for (let i = 0; i < Math.max(ran.length, now.length); i++) {
    const before = ran[i]?.id
    const after = now[i]?.id
    if (before === after) continue
    if (before === undefined) {
      return { stepId: after!, detail: `The orchestration has a step "${after}" the execution did not have` }
    }
    return {
      stepId: before,
      detail:
        after === undefined
          ? `The orchestration no longer has step "${before}"`
          : `The orchestration's step ${i + 1} is now "${after}", was "${before}"`
    }
  }
  return undefined
}

/**
 * What a retry carries over: the steps of `steps` completed in the execution
 * retried, in step order; what it carried itself counts as completed there.
 */
export const carriedSteps = (
  steps: ReadonlyArray<Step>,
  source: { readonly carried: ReadonlyArray<CarriedStep> | null; readonly completed: ReadonlyArray<CarriedStep> }
): ReadonlyArray<CarriedStep> => {
  const done = new Map<string, CarriedStep>()
  for (const step of source.carried ?? []) done.set(step.stepId, step)
  for (const step of source.completed) done.set(step.stepId, step)
  return steps.flatMap((step) => {
    const kept = done.get(step.id)
    return kept === undefined ? [] : [kept]
  })
}

/** Starting, reading, listing, cancelling and retrying executions. */
export class Executions extends Context.Service<Executions>()("agent-host/Executions", {
  make: Effect.gen(function* () {
    const orchestrations = yield* Orchestrations
    const repo = yield* ExecutionsRepo
    const toolCalls = yield* ToolCallsRepo
    const config = yield* AppConfig
    const runs = yield* DurableRuns.runsOf({
      notStarted: (executionId) =>
        new ExecutionNotStarted({ detail: "The execution is stored and will start shortly", executionId }),
      workflow: ExecutionWorkflow,
      payload: (executionId) => ({ executionId }),
      slots: "execution",
      what: "An execution",
      answer: (claimed, status) => ({ executionId: claimed.id, status, orchestrationId: claimed.orchestrationId }),
      finalEvents: ["execution.completed", "execution.failed", "execution.cancelled"],
      repo,
      // DurableRunRepo.events reads at most 500.
      eventsPageSize: 500,
      retention: (config) => config.executionMessagesRetention
    })

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

    const start = Traced.fn("Executions.start")(function* (
      tenantId: TenantId,
      orchestrationId: OrchestrationId,
      { payload: request, headers }: DurableRuns.StartRequest<ExecuteRequest>
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
      return yield* runs.accept(tenantId, headers, {
        hash: () => requestHash(orchestrationId, request),
        prepare: Effect.gen(function* () {
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
          return (run: DurableRuns.NewRun) =>
            repo.insert({
              ...run,
              orchestrationId,
              input: request.input,
              variables,
              steps: orchestration.steps,
              timeoutMs: orchestration.timeoutMs
            })
        })
      })
    })

    /**
     * A new execution of a failed or cancelled one, on the steps, input and
     * variables it ran, carrying over the steps it completed (their results
     * and tool calls). Accepted as an execute is: the tenant's budget, its run
     * caps, its Idempotency-Key.
     */
    const retry = Traced.fn("Executions.retry")(function* (
      tenantId: TenantId,
      id: string,
      headers: DurableRuns.StartHeaders
    ) {
      return yield* runs.accept(tenantId, headers, {
        hash: () => retryHash(id),
        prepare: Effect.gen(function* () {
          const found = yield* repo.retrySource(tenantId, id)
          if (Option.isNone(found)) return yield* new NotFound({ detail: `No execution ${id}` })
          const source = found.value
          if (source.status !== "failed" && source.status !== "cancelled") {
            return yield* new Conflict({
              detail: `The execution is ${source.status}: only a failed or cancelled execution can be retried`
            })
          }
          const orchestrationId = OrchestrationId.make(source.orchestrationId)
          const orchestration = yield* orchestrations
            .get(tenantId, orchestrationId)
            .pipe(Effect.catchTag("NotFound", () => Effect.succeed(undefined)))
          if (orchestration === undefined) {
            return yield* new OrchestrationChanged({
              detail: `The orchestration ${orchestrationId} was deleted since the execution`
            })
          }
          if (orchestration.status !== "active") {
            return yield* new OrchestrationChanged({
              detail: `The orchestration ${orchestrationId} is inactive`
            })
          }
          const changed = changedStep(source.steps, orchestration.steps)
          if (changed !== undefined) {
            return yield* new OrchestrationChanged({
              detail: `${changed.detail}: its steps changed since the execution`,
              stepId: changed.stepId
            })
          }
          const carried = carriedSteps(source.steps, source)
          return (run: DurableRuns.NewRun) =>
            repo.insertRetry(
              {
                ...run,
                orchestrationId,
                input: source.input,
                variables: source.variables,
                steps: source.steps,
                timeoutMs: source.timeoutMs,
                retryOf: source.id,
                carried
              },
              // The carried steps' calls are shown on the retry as its own (marked carried).
              toolCalls.copyCalls(
                tenantId,
                source.id,
                run.id,
                carried.map((step) => step.stepId)
              )
            )
        })
      })
    })

    const find = (tenantId: TenantId, id: string) =>
      Effect.flatMap(repo.get(tenantId, id), (execution) =>
        Option.isNone(execution)
          ? Effect.fail(new NotFound({ detail: `No execution ${id}` }))
          : Effect.succeed(execution.value)
      )

    const withWaiting = (tenantId: TenantId, executions: ReadonlyArray<Execution>) =>
      runs.withWaiting(tenantId, executions, (execution) => execution.id)

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
      if (DurableRuns.isFinal(execution.status)) {
        return yield* new Conflict({ detail: `The execution is already ${execution.status}` })
      }
      const cancelled = yield* repo.transition(id, "cancelled", { error: "Cancelled" }).pipe(Effect.orDie)
      if (!cancelled) return yield* new Conflict({ detail: "The execution has just finished" })
      yield* Metric.update(Metrics.executions("cancelled"), 1)
      // Running steps are aborted; the read model already says cancelled.
      yield* runs.stop(id)
      // Their tool calls in flight were stopped with them.
      yield* toolCalls.cancelRunning(id).pipe(Effect.orDie)
      // Its approvals wait no more (docs/approvals.md).
      yield* (yield* Approvals).cancelRun(id)
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
      return yield* runs.follow(tenantId, id, lastEventId, {
        at: deadline.value + finalEventGraceMs,
        reason: "executionTimeout"
      })
    })

    // An execution's timeout holds whatever became of its workflow (its node
    // died, it crashed, the database failed under it): past created_at +
    // timeoutMs (and a few seconds for a live run to record its own timeout)
    // it is failed here, and its workflow, if any, interrupted. The cluster's
    // stored messages of executions finished over EXECUTION_MESSAGES_RETENTION
    // ago are deleted by the sweeps.
    const durable = runs.sweeps(
      Effect.gen(function* () {
        const ids = yield* repo.failTimedOut(5)
        if (ids.length === 0) return ids
        yield* Effect.logWarning("Executions past their timeout failed by the sweep").pipe(
          Effect.annotateLogs({ count: ids.length })
        )
        yield* Metric.update(Metrics.executions("failed"), ids.length)
        return ids
      })
    )
    // A call of a step a retry carried over (or of an agent that step asked, `step/...`) says so.
    const markCarried = (execution: Execution) => {
      const carried = new Set(execution.carriedSteps ?? [])
      return <C extends { readonly scope: string }>(call: C): C & { readonly carried?: boolean } =>
        carried.size > 0 && carried.has(call.scope.split("/")[0]!) ? { ...call, carried: true } : call
    }

    /** The tool calls of the tenant's execution, in order. */
    const listToolCalls = Traced.fn("Executions.toolCalls")(function* (tenantId: TenantId, id: string) {
      const execution = yield* find(tenantId, id)
      return { data: (yield* toolCalls.callsOf(tenantId, id).pipe(Effect.orDie)).map(markCarried(execution)) }
    })

    /** One tool call of a step, with its whole result. */
    const toolCall = Traced.fn("Executions.toolCall")(function* (
      tenantId: TenantId,
      id: string,
      stepId: string,
      callId: string
    ) {
      const found = yield* toolCalls
        .storedCall({ tenantId, runKind: "execution", runId: id, scope: stepId }, callId)
        .pipe(Effect.orDie)
      const execution = yield* Effect.option(find(tenantId, id))
      if (Option.isNone(found) || Option.isNone(execution)) {
        return yield* new NotFound({ detail: `No tool call ${callId} of step ${stepId} of execution ${id}` })
      }
      const { fullResult, record } = found.value
      return markCarried(execution.value)({
        ...record,
        fullResult: record.status === "succeeded" ? (fullResult ?? record.result) : null
      })
    })

    return {
      start,
      retry,
      get,
      list,
      cancel,
      toolCalls: listToolCalls,
      toolCall,
      events,
      sweeps: durable,
      sweep: DurableRuns.sweep(durable),
      nudge: DurableRuns.nudge(durable, "Executions"),
      reap: durable.reap,
      prune: DurableRuns.prune(durable)
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([
      Orchestrations.layer,
      ExecutionsRepo.layer,
      TokenBudget.layer,
      EventStreams.layer,
      ToolCallsRepo.layer
    ])
  )

  /** The sweeps of executions (DurableRuns.sweeper), a cluster singleton. */
  static readonly sweeper = DurableRuns.sweeper(
    "ExecutionsSweep",
    "Executions",
    Executions.useSync((s) => s.sweeps)
  )
}
