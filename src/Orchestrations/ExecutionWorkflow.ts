import { Clock, Duration, Effect, Metric, Option, Result, Schema } from "effect"
import { Activity, Workflow } from "effect/workflow"
import { AgentsRepo } from "../Agents/Repo.ts"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import { AgentId, TenantId } from "../Domain/Ids.ts"
import { Models } from "../Models/Models.ts"
import { Metrics } from "../Platform/Observability.ts"
import type { Step } from "./Api.ts"
import { plan, renderWithin } from "./Orchestrations.ts"
import { ExecutionsRepo } from "./Repo.ts"

/**
 * One execution is one durable workflow of effect's cluster. Each step is an
 * activity: its result is stored when it completes, so after a crash or a
 * restart a completed step is never asked again, a step that was in flight
 * runs again, and the execution goes on from there. Every status change is
 * written to the executions read model as it happens.
 *
 * Only the steps are activities. The rest is idempotent and simply runs again
 * when a run is replayed: the definition was fixed when the execution was
 * accepted, and a status moves only while the execution is unfinished. That
 * keeps a one-step run to two stored cluster messages (the run and its step).
 */
export const ExecutionWorkflow = Workflow.make("Execution", {
  payload: { executionId: Schema.String },
  idempotencyKey: ({ executionId }) => executionId
})

const StepResult = Schema.Struct({ output: Schema.String, tokens: Schema.Int })

class StepFailed extends Schema.TaggedError<StepFailed>()("StepFailed", {
  step: Schema.String,
  message: Schema.String,
  tokens: Schema.Int
}) {}

const run = Effect.fn("ExecutionWorkflow.run")(function*({ executionId }: { readonly executionId: string }) {
  const executions = yield* ExecutionsRepo
  const agents = yield* AgentsRepo
  const models = yield* Models
  const { maxPromptChars } = yield* AppConfig
  const budget = yield* TokenBudget

  const row = yield* executions.begin(executionId)
  if (row.status !== "running") return
  const snapshot = { ...row, createdAtMs: row.createdAt.getTime() }

  const steps = new Map(snapshot.steps.map((step) => [step.id, step as Step]))
  const deadline = snapshot.createdAtMs + snapshot.timeoutMs
  const outputs: Record<string, string> = {}
  let tokensUsed = 0

  const runStep = (step: Step) =>
    Activity.make({
      name: `step:${step.id}`,
      success: StepResult,
      error: StepFailed,
      execute: Effect.gen(function*() {
        const fail = (message: string) => new StepFailed({ step: step.id, message, tokens: 0 })
        const remaining = deadline - (yield* Clock.currentTimeMillis)
        if (remaining <= 0) return yield* fail(`The execution timed out after ${snapshot.timeoutMs} ms`)
        const agent = yield* agents.findById(snapshot.tenantId as never, AgentId.make(step.agentId))
        if (Option.isNone(agent) || agent.value.status !== "active") {
          return yield* fail(`Step ${step.id}: agent ${step.agentId} is missing or inactive`)
        }
        // The plan is read again before each step: the model may not be one it
        // may use (any more), and the day's tokens may be spent.
        yield* budget.admit(TenantId.make(snapshot.tenantId), agent.value.model).pipe(
          Effect.mapError((refused) => fail(`Step ${step.id}: ${refused.detail}`))
        )
        // Outputs of earlier steps are as long as the models made them: only
        // now is the size known, and rendering stops as soon as it is too much.
        const rendered = renderWithin(step.prompt, { input: snapshot.input, variables: snapshot.variables, outputs }, maxPromptChars)
        if (Result.isFailure(rendered)) {
          return yield* fail(
            `Step ${step.id}: its prompt renders to more than ${maxPromptChars} characters (MAX_PROMPT_CHARS)`
          )
        }
        const prompt = rendered.success
        yield* executions.stepEvent(executionId, "step.started", step.id)
        const reply = yield* models.generate({
          model: agent.value.model,
          system: agent.value.instructions,
          messages: [{ role: "user", content: prompt }]
        }).pipe(
          Effect.mapError((error) => fail(`Step ${step.id}: ${error.message}`)),
          Effect.timeoutOrElse({
            duration: Duration.millis(remaining),
            orElse: () => Effect.fail(fail(`The execution timed out after ${snapshot.timeoutMs} ms`))
          })
        )
        const result = { output: reply.text, tokens: reply.inputTokens + reply.outputTokens }
        yield* budget.charge(TenantId.make(snapshot.tenantId), result.tokens)
        yield* executions.stepEvent(executionId, "step.completed", step.id, result)
        yield* Effect.logInfo("Step completed").pipe(Effect.annotateLogs({ executionId, stepId: step.id }))
        return result
      })
    })

  const planned = plan(snapshot.steps)
  if (Result.isFailure(planned)) {
    yield* executions.transition(executionId, "failed", { error: "The orchestration's steps do not form a valid graph" })
    return
  }

  const run = Effect.forEach(planned.success.layers, (layer) =>
    Effect.forEach(layer, (id) =>
      Effect.tap(runStep(steps.get(id)!), (result) =>
        Effect.sync(() => {
          outputs[id] = result.output
          tokensUsed += result.tokens
        })), { concurrency: "unbounded", discard: true }), { discard: true })

  const outcome = yield* Effect.result(run)
  const last = snapshot.steps[snapshot.steps.length - 1]!
  const final = Result.isSuccess(outcome) ? "completed" : "failed"
  const moved = yield* Result.isSuccess(outcome)
    ? executions.transition(executionId, "completed", { output: outputs[last.id] ?? "", tokensUsed })
    : executions.transition(executionId, "failed", { error: outcome.failure.message, tokensUsed })
  if (moved) yield* Metric.update(Metric.withAttributes(Metrics.executions, { status: final }), 1)
})

/** Counts the workflows running on this node while they run. */
export const layer = ExecutionWorkflow.toLayer((payload) =>
  Effect.acquireUseRelease(
    Metric.modify(Metrics.workflowsInFlight, 1),
    () => run(payload),
    () => Metric.modify(Metrics.workflowsInFlight, -1)
  )
)
