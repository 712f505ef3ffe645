import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { isSqlError } from "effect/sql/SqlError"
import * as Activity from "effect/workflow/Activity"
import * as Workflow from "effect/workflow/Workflow"
import * as WorkflowEngine from "effect/workflow/WorkflowEngine"
import { Approvals } from "../Approvals/Approvals.ts"
import { awaitApproval, loopApprovals } from "../Approvals/Wait.ts"
import { AgentsRepo } from "../Agents/Repo.ts"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import { AgentId, TenantId } from "../Domain/Ids.ts"
import { retryTransient } from "../Database/Errors.ts"
import { storable } from "../Domain/Text.ts"
import { KnowledgeSearch } from "../Knowledge/Search.ts"
import { Models } from "../Models/Models.ts"
import { Metrics } from "../Observability/Observability.ts"
import { RunSignals } from "../Runtime/RunSignals.ts"
import { RunSlots } from "../Runtime/RunSlots.ts"
import type { Step } from "./Api.ts"
import { plan, renderWithin } from "./Orchestrations.ts"
import { ExecutionsRepo } from "./ExecutionsRepo.ts"
import { AgentTools } from "../Tools/AgentTools.ts"
import { describeProblems, type LoopModelRequest, requestTokens, ToolLoop } from "../Tools/Loop.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * One execution is one durable workflow of effect's cluster. Each step of a
 * run of several is an activity: its result is stored when it completes (the
 * one step of a one-step run is stored with the run's final status), so
 * after a crash or a
 * restart a completed step is never asked again, a step that was in flight
 * runs again, and the execution goes on from there. Every status change is
 * written to the executions read model as it happens.
 *
 * Only the steps are activities. The rest is idempotent and simply runs again
 * when a run is replayed: the definition was fixed when the execution was
 * accepted, and a status moves only while the execution is unfinished. That
 * keeps a one-step run to one stored cluster message (the run) and a run of
 * n steps to n + 1.
 *
 * The database may fail under a run (a cut connection, a restart, a
 * statement timeout): each statement is tried again with backoff while the
 * error is transient, for up to two minutes; what still fails, and anything
 * unexpected, moves the execution to `failed` with the reason rather than
 * ending the workflow with the execution left unfinished. If even that
 * cannot be written, the sweep fails the execution at its timeout.
 */
export const ExecutionWorkflow = Workflow.make("Execution", {
  payload: { executionId: Schema.String },
  idempotencyKey: ({ executionId }) => executionId
})

const StepResult = Schema.Struct({
  output: Schema.String,
  tokens: Schema.Int,
  // The approvals the step stopped for (docs/approvals.md): it runs again once they are decided.
  waitingFor: Schema.optionalKey(Schema.Array(Schema.String))
})

class StepFailed extends Schema.TaggedError<StepFailed>()("StepFailed", {
  step: Schema.String,
  message: Schema.String,
  tokens: Schema.Int
}) {}

// Repos that die on SQL errors (the request path maps those defects to
// 503/400) have them back as typed failures here, to be retried.
const sqlErrorsTyped = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.catchDefect(effect, (defect) => (isSqlError(defect) ? Effect.fail(defect) : Effect.die(defect)))

const databaseFailure = (error: { readonly message: string }) =>
  storable(`The database could not be reached or refused a write: ${error.message}`)

const run = Traced.fn("ExecutionWorkflow.run")(function* ({ executionId }: { readonly executionId: string }) {
  const executions = yield* ExecutionsRepo
  const agents = yield* AgentsRepo
  const models = yield* Models
  const { maxPromptChars } = yield* AppConfig
  const budget = yield* TokenBudget
  const knowledge = yield* KnowledgeSearch
  const signals = yield* RunSignals
  const loop = yield* ToolLoop
  const { askAgent, toolsOf } = yield* AgentTools

  // The ids an operator finds the run by, on its span and on each step's.
  yield* Effect.annotateCurrentSpan("execution.id", executionId)
  const row = yield* retryTransient(executions.begin(executionId))
  const runAttributes = {
    "execution.id": executionId,
    "orchestration.id": row.orchestrationId,
    "tenant.id": row.tenantId
  }
  yield* Effect.annotateCurrentSpan(runAttributes)
  const approvals = yield* Approvals
  if (row.status !== "running") {
    // Ended while it waited (cancelled, timed out): its approvals wait no more.
    yield* retryTransient(approvals.cancelRun(executionId))
    return
  }
  // The engine's id of this run: the approvals' deferreds are its.
  const { executionId: workflowExecutionId } = yield* WorkflowEngine.WorkflowInstance
  const snapshot = { ...row, createdAtMs: row.createdAt.getTime() }

  const steps = new Map(snapshot.steps.map((step) => [step.id, step as Step]))
  // The time it waited for people does not count (migration 0036).
  const deadline = snapshot.createdAtMs + snapshot.timeoutMs + snapshot.heldMs
  // No prototype: a step id such as `__proto__` (refused when saved, but a
  // definition stored before that still runs) is then an ordinary key.
  const outputs: Record<string, string> = Object.create(null)
  // Only what this run spends: a retry's carried steps were counted by the run that made them.
  let tokensUsed = 0
  // A retry's steps carried over from the execution it retries: their
  // outputs are used as they are, their models never asked again (their
  // `step.completed` events were logged with the run's start, `begin`).
  const carried = new Map((snapshot.carried ?? []).map((step) => [step.stepId, step]))

  // A one-step run's step is not an activity (runStep below): its
  // `step.started` event is logged with the run's start (`begin`), its
  // `step.completed` with the run's final status.
  const oneStep = snapshot.steps.length === 1

  const stepApprovals = (step: Step) =>
    loopApprovals(approvals, {
      workflow: ExecutionWorkflow,
      workflowExecutionId,
      tenantId: TenantId.make(snapshot.tenantId),
      runKind: "execution",
      runId: executionId,
      scope: step.id,
      owner: { kind: "orchestration", id: snapshot.orchestrationId }
    })

  const stepEffect = (step: Step, resumed: boolean) =>
    Effect.gen(function* () {
      const fail = (message: string) => new StepFailed({ step: step.id, message, tokens: 0 })
      const remaining = deadline - (yield* Clock.currentTimeMillis)
      if (remaining <= 0) return yield* fail(`The execution timed out after ${snapshot.timeoutMs} ms`)
      const databaseFailed = (error: { readonly message: string }) => fail(`Step ${step.id}: ${databaseFailure(error)}`)
      const agent = yield* retryTransient(
        sqlErrorsTyped(agents.findById(snapshot.tenantId as never, AgentId.make(step.agentId)))
      ).pipe(Effect.mapError(databaseFailed))
      if (Option.isNone(agent) || agent.value.status !== "active") {
        return yield* fail(`Step ${step.id}: agent ${step.agentId} is missing or inactive`)
      }
      // Outputs of earlier steps are as long as the models made them: only
      // now is the size known, and rendering stops as soon as it is too much.
      const rendered = renderWithin(
        step.prompt,
        { input: snapshot.input, variables: snapshot.variables, outputs },
        maxPromptChars
      )
      if (Result.isFailure(rendered)) {
        return yield* fail(
          `Step ${step.id}: its prompt renders to more than ${maxPromptChars} characters (MAX_PROMPT_CHARS)`
        )
      }
      const prompt = rendered.success
      if (!oneStep && !resumed) {
        yield* retryTransient(executions.stepEvent(executionId, "step.started", step.id)).pipe(
          Effect.mapError(databaseFailed)
        )
      }
      // An agent with knowledge is grounded on what it holds for the step's prompt, within half of what the prompt leaves.
      const { system } = yield* retryTransient(
        sqlErrorsTyped(
          knowledge.ground({
            tenantId: TenantId.make(snapshot.tenantId),
            instructions: agent.value.instructions,
            knowledgeIds: agent.value.knowledgeIds,
            query: prompt,
            budget: () =>
              Math.floor(
                (models.contextBudget(agent.value.model) -
                  models.countTokens(agent.value.instructions) -
                  models.countTokens(prompt)) /
                  2
              )
          })
        )
      ).pipe(Effect.mapError(databaseFailed))
      // The plan is read again before each model call, in the statement that
      // reserves the call's worst case of the day's tokens: the model may not
      // be one it may use (any more), and the tokens left may be spent or
      // held by calls in flight.
      const reserve = (promptTokens: number) =>
        retryTransient(
          sqlErrorsTyped(budget.reserve(TenantId.make(snapshot.tenantId), { model: agent.value.model, promptTokens }))
        ).pipe(
          Effect.mapError((error) =>
            error._tag === "TokenBudgetSpent" || error._tag === "ModelNotAllowed"
              ? fail(`Step ${step.id}: ${error.detail}`)
              : databaseFailed(error)
          )
        )
      // Each call's tokens are settled before the loop goes on.
      const callModel = (request: LoopModelRequest) =>
        budget.reserving(
          reserve(requestTokens(models, agent.value.model, request)),
          (held) => models.generate({ ...request, model: agent.value.model, maxOutputTokens: held.maxOutputTokens }),
          (reply, held) =>
            retryTransient(sqlErrorsTyped(budget.settle(held, reply.inputTokens + reply.outputTokens))).pipe(
              Effect.mapError(databaseFailed),
              Effect.as(reply)
            )
        )
      const tools = yield* retryTransient(
        sqlErrorsTyped(toolsOf(TenantId.make(snapshot.tenantId), agent.value.toolIds, step.toolIds))
      ).pipe(Effect.mapError(databaseFailed))
      // The step's own format wins over its agent's.
      const responseFormat = step.responseFormat ?? agent.value.responseFormat ?? undefined
      const result: typeof StepResult.Type = yield* loop
        .run({
          key: { tenantId: TenantId.make(snapshot.tenantId), runKind: "execution", runId: executionId, scope: step.id },
          durable: true,
          system,
          messages: [{ role: "user", content: prompt }],
          tools,
          agentChain: [step.agentId],
          askAgent: askAgent({
            tenantId: TenantId.make(snapshot.tenantId),
            runKind: "execution",
            runId: executionId,
            scope: step.id
          }),
          callModel,
          responseFormat,
          approvals: stepApprovals(step),
          emit: (event) =>
            retryTransient(
              executions.stepEvent(executionId, event.type, step.id, {
                callId: event.callId,
                tool: event.tool,
                ...event.data
              })
            ).pipe(Effect.orDie)
        })
        .pipe(
          // A reply still not matching the format after being told what was wrong fails the step, naming where.
          Effect.flatMap((outcome) =>
            outcome.waitingFor !== undefined
              ? // Its tokens are counted when the step runs again and replays these turns.
                Effect.succeed({ output: "", tokens: 0, waitingFor: outcome.waitingFor })
              : outcome.invalidOutput === undefined
                ? Effect.succeed({ output: storable(outcome.reply.text), tokens: outcome.tokens })
                : Effect.fail(
                    new StepFailed({
                      step: step.id,
                      message: storable(
                        `Step ${step.id}: the reply does not match the response format "${responseFormat!.name}": ` +
                          describeProblems(outcome.invalidOutput)
                      ),
                      tokens: outcome.tokens
                    })
                  )
          ),
          Effect.mapError((error) => (error._tag === "ModelError" ? fail(`Step ${step.id}: ${error.message}`) : error)),
          Effect.timeoutOrElse({
            duration: Duration.millis(remaining),
            orElse: () => Effect.fail(fail(`The execution timed out after ${snapshot.timeoutMs} ms`))
          })
        )
      if (result.waitingFor !== undefined) return result
      if (!oneStep) {
        yield* retryTransient(executions.stepEvent(executionId, "step.completed", step.id, result)).pipe(
          Effect.mapError(databaseFailed)
        )
      }
      yield* Effect.logInfo("Step completed").pipe(Effect.annotateLogs({ executionId, stepId: step.id }))
      return result
    }).pipe(
      Traced.withSpan("ExecutionWorkflow.step", {
        attributes: { ...runAttributes, "execution.step.id": step.id, "agent.id": step.agentId }
      })
    )

  // The step of a one-step run is not an activity: its result is stored with
  // the run's final status (the transition below), in one statement, and a
  // replay after that returns at `begin`, so a stored activity reply would
  // add no guarantee, only a message, its reply and a trip through the
  // cluster. Killed before that statement, the step runs again, as an
  // activity killed before its reply is stored does.
  // A cancel stops a step where it is, its model call aborted, on whichever node runs it.
  const cancellableStep = (step: Step, resumed: boolean) =>
    signals.cancellable(
      executionId,
      () => new StepFailed({ step: step.id, message: "Cancelled", tokens: 0 })
    )(stepEffect(step, resumed))
  // After a wait the step runs again as a new activity (its first one's result, the wait, is stored), whose loop
  // replays what it kept and finds the decisions.
  const stepOnce = (step: Step, after: string | undefined) =>
    oneStep
      ? cancellableStep(step, after !== undefined)
      : Activity.make({
          name: after === undefined ? `step:${step.id}` : `step:${step.id}:after:${after}`,
          success: StepResult,
          error: StepFailed,
          execute: cancellableStep(step, after !== undefined)
        })

  const runStep = (step: Step) =>
    Effect.gen(function* () {
      let after: string | undefined
      while (true) {
        const result = yield* stepOnce(step, after)
        if (result.waitingFor === undefined || result.waitingFor.length === 0) return result
        for (const id of result.waitingFor) yield* awaitApproval(approvals, id)
        after = result.waitingFor[result.waitingFor.length - 1]
      }
    })

  const planned = plan(snapshot.steps)
  if (Result.isFailure(planned)) {
    yield* retryTransient(
      executions.transition(executionId, "failed", { error: "The orchestration's steps do not form a valid graph" })
    )
    return
  }

  const run = Effect.forEach(
    planned.success.layers,
    (layer) =>
      Effect.forEach(
        layer,
        (id) => {
          const kept = carried.get(id)
          if (kept !== undefined) {
            outputs[id] = kept.output
            return Effect.void
          }
          return Effect.tap(runStep(steps.get(id)!), (result) =>
            Effect.sync(() => {
              outputs[id] = result.output
              tokensUsed += result.tokens
            })
          )
        },
        { concurrency: "unbounded", discard: true }
      ),
    { discard: true }
  )

  const outcome = yield* Effect.result(run)
  const last = snapshot.steps[snapshot.steps.length - 1]!
  const final = Result.isSuccess(outcome) ? "completed" : "failed"
  const moved = yield* retryTransient(
    Result.isSuccess(outcome)
      ? executions.transition(executionId, "completed", {
          output: outputs[last.id] ?? "",
          tokensUsed,
          ...(oneStep && !carried.has(last.id)
            ? { stepCompleted: { stepId: last.id, data: { output: outputs[last.id] ?? "", tokens: tokensUsed } } }
            : {})
        })
      : executions.transition(executionId, "failed", { error: storable(outcome.failure.message), tokensUsed })
  )
  if (moved) yield* Metric.update(Metrics.executions(final), 1)
})

/**
 * Whatever ended the run without a final status (a database error that
 * outlived its retries, a defect) fails the execution with the reason.
 * Interruptions (a cancel, a node stopping) pass: the run resumes elsewhere.
 */
const failUnfinished = (executionId: string) => (cause: Cause.Cause<unknown>) =>
  Effect.gen(function* () {
    if (Cause.hasInterrupts(cause)) return yield* Effect.interrupt
    const error = Cause.squash(cause)
    const message = isSqlError(error) ? databaseFailure(error) : "The execution failed unexpectedly"
    yield* Effect.logError("Execution failed unexpectedly", cause).pipe(Effect.annotateLogs({ executionId }))
    const executions = yield* ExecutionsRepo
    const moved = yield* retryTransient(executions.transition(executionId, "failed", { error: message })).pipe(
      Effect.catchCause((cause) =>
        Effect.as(
          Effect.logError("Could not record an execution's failure; it fails at its timeout", cause).pipe(
            Effect.annotateLogs({ executionId })
          ),
          false
        )
      )
    )
    if (moved) yield* Metric.update(Metrics.executions("failed"), 1)
  })

/** Counts the workflows running on this node while they run. */
export const layer = ExecutionWorkflow.toLayer((payload) =>
  Effect.acquireUseRelease(
    Metric.modify(Metrics.workflowsInFlight, 1),
    // The run waits for, then holds, one of its tenant's running slots.
    () =>
      Effect.gen(function* () {
        return yield* (yield* RunSlots).hold("execution", payload.executionId)(run(payload))
      }).pipe(Effect.catchCause(failUnfinished(payload.executionId))),
    () => Metric.modify(Metrics.workflowsInFlight, -1)
  )
)
