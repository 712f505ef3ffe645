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
import { AgentsRepo } from "../Agents/Repo.ts"
import { Approvals } from "../Approvals/Approvals.ts"
import type { Approval } from "../Approvals/Api.ts"
import { awaitApproval, loopApprovals } from "../Approvals/Wait.ts"
import { tokenFor } from "../Approvals/Wake.ts"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import { retryTransient } from "../Database/Errors.ts"
import { AgentId, newId, type TenantId } from "../Domain/Ids.ts"
import { storable } from "../Domain/Text.ts"
import { KnowledgeSearch } from "../Knowledge/Search.ts"
import { Models } from "../Models/Models.ts"
import { Metrics } from "../Observability/Observability.ts"
import { RunSignals } from "../Runtime/RunSignals.ts"
import { RunSlots } from "../Runtime/RunSlots.ts"
import { AgentTools } from "../Tools/AgentTools.ts"
import { describeProblems, type LoopModelRequest, requestTokens, ToolLoop } from "../Tools/Loop.ts"
import { Webhooks } from "../Webhooks/Webhooks.ts"
import type { ResultApproval, StopReason } from "./Api.ts"
import { TeamRun } from "./Api.ts"
import { type Outcome, TeamsRepo } from "./Repo.ts"
import * as Room from "./Room.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * One team run is one durable workflow of effect's cluster, sharded like
 * executions. Each turn is an activity (`turn:<index>`, and `closing:<index>`
 * for the closing turn at a limit) whose result (speaker, content, tokens,
 * the final answer it declared, or the limit it met) is stored when it
 * completes: after a crash or a restart a completed turn is never asked
 * again, a turn that was in flight runs again (its transcript row is written
 * again, not twice), and the run goes on from there.
 *
 * A speaker with tools runs the tool loop in its turn (src/Tools/Loop.ts),
 * durably: each reply of the model and each call is kept under the turn
 * (`turn-<index>`), so a turn run again after a crash replays the calls that
 * ended instead of making them again, and makes one in flight again with
 * the same Idempotency-Key.
 *
 * The limits are the service's, checked inside each turn's activity so that
 * a replay reaches the same decisions: `maxTurns` before a turn, the run's
 * token budget before a turn that would cross it (an estimate: the prompt's
 * tokens plus a reply's worth) and before each further round of tool calls,
 * the timeout before each turn and around its whole loop. At a limit one
 * short closing turn, without tools, writes the final answer. The tenant's
 * plan admits every model call and is charged after it.
 *
 * A speaker whose agent has a response format answers in JSON of its schema
 * (the loop asks once more, told what was wrong, then gives up): its turn's
 * content is the JSON, which neither ends the run nor picks who speaks next.
 * A turn that still does not match fails the run, naming the format and the
 * path; a closing turn that does not fails quietly, as on a model error.
 *
 * The final status and the room's webhook event are written in one
 * transaction; the event is handed to delivery once committed. A team whose
 * `resultApproval` is required first asks a person to approve its result
 * (an approval of kind `result`, awaited as a tool call's is): approved, the
 * run completes with it (as edited); rejected or expired, it fails.
 */
export const TeamRunWorkflow = Workflow.make("TeamRun", {
  payload: { runId: Schema.String },
  idempotencyKey: ({ runId }) => runId
})

/** The tool loop's scope of turn `index` (ToolCallsRepo): its calls are shown on that turn of the transcript. */
export const turnScope = (index: number) => `turn-${index}`

/** What a reply is expected to cost on top of its prompt, for the budget check before a turn. */
export const replyTokensEstimate = 512

const TurnOutcome = Schema.Struct({
  /** The limit this turn met instead of speaking (no content then). */
  stop: Schema.NullOr(Schema.Literals(["timeout", "token_budget", "failed"])),
  agentId: Schema.String,
  content: Schema.String,
  tokens: Schema.Int,
  /** The final answer the turn declared, when its speaker may end the run. */
  final: Schema.NullOr(Schema.String),
  /** The approvals the turn stopped for (docs/approvals.md): it runs again once they are decided. */
  waitingFor: Schema.optionalKey(Schema.Array(Schema.String))
})
type TurnOutcome = typeof TurnOutcome.Type

class TurnFailed extends Schema.TaggedError<TurnFailed>()("TurnFailed", {
  message: Schema.String
}) {}

// Repos that die on SQL errors have them back as typed failures here, to be retried.
const sqlErrorsTyped = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.catchDefect(effect, (defect) => (isSqlError(defect) ? Effect.fail(defect) : Effect.die(defect)))

const databaseFailure = (error: { readonly message: string }) =>
  storable(`The database could not be reached or refused a write: ${error.message}`)

const encodeRun = Schema.encodeSync(Schema.toCodecJson(TeamRun))

/**
 * Moves a run to its final status and, in the same transaction, writes the
 * room's webhook event (the run as GET shows it, without its transcript);
 * hands the event to delivery once committed. False when the run was
 * already final.
 */
export const finishRun = Traced.fn("TeamRuns.finish")(function* (
  runId: string,
  to: "completed" | "failed" | "cancelled",
  fields: Outcome
) {
  const repo = yield* TeamsRepo
  const webhooks = yield* Webhooks
  const moved = yield* repo.withTransaction(
    Effect.gen(function* () {
      const finished = yield* repo.finish(runId, to, fields)
      if (Option.isNone(finished)) return Option.none<string | null>()
      const { run, tenantId } = finished.value
      const eventId = yield* webhooks.enqueue({
        tenantId,
        owner: { kind: "team", id: run.teamId },
        subjectId: runId,
        type: `team.run.${to}`,
        data: encodeRun(run)
      })
      return Option.some(eventId)
    })
  )
  if (Option.isNone(moved)) return false
  yield* Metric.update(Metrics.teamRuns(to), 1)
  // Delivery starts once committed, on its own (the outbox sweep catches what this misses).
  if (moved.value !== null) yield* Effect.forkDetach(webhooks.deliver(moved.value))
  return true
})

/** Runs failed by the sweep past their timeout: their webhook events in the same transaction, delivered after. */
export const reapTimedOut = Traced.fn("TeamRuns.reap")(function* (graceSeconds: number) {
  const repo = yield* TeamsRepo
  const webhooks = yield* Webhooks
  const reaped = yield* repo.withTransaction(
    Effect.gen(function* () {
      const runs = yield* repo.failTimedOut(graceSeconds)
      const events: Array<string> = []
      for (const { run, tenantId } of runs) {
        const eventId = yield* webhooks.enqueue({
          tenantId,
          owner: { kind: "team", id: run.teamId },
          subjectId: run.runId,
          type: "team.run.failed",
          data: encodeRun(run)
        })
        if (eventId !== null) events.push(eventId)
      }
      return { runIds: runs.map(({ run }) => run.runId), events }
    })
  )
  if (reaped.runIds.length > 0) {
    yield* Metric.update(Metrics.teamRuns("failed"), reaped.runIds.length)
  }
  yield* Effect.forEach(reaped.events, (eventId) => Effect.forkDetach(webhooks.deliver(eventId)), { discard: true })
  return reaped.runIds
})

/** Why a run whose result was not approved failed. */
const notApproved = (approval: Approval) =>
  approval.status === "rejected"
    ? `The result was rejected by ${approval.decidedBy ?? "unknown"}` +
      (approval.note === null ? "" : `: ${approval.note}`)
    : `The result was not approved before its approval expired at ${approval.expiresAt.toISOString()}`

const limitText: Record<"max_turns" | "token_budget" | "timeout", string> = {
  max_turns: "the most turns the team allows",
  token_budget: "the team's token budget",
  timeout: "the team's time limit"
}

const run = Traced.fn("TeamRunWorkflow.run")(function* ({ runId }: { readonly runId: string }) {
  const repo = yield* TeamsRepo
  const agents = yield* AgentsRepo
  const models = yield* Models
  const config = yield* AppConfig
  const budget = yield* TokenBudget
  const knowledge = yield* KnowledgeSearch
  const signals = yield* RunSignals
  const loop = yield* ToolLoop
  const agentTools = yield* AgentTools

  // The ids an operator finds the run by, on its span and on each turn's.
  yield* Effect.annotateCurrentSpan("team_run.id", runId)
  const begun = yield* retryTransient(repo.begin(runId))
  const runAttributes = { "team_run.id": runId, "team.id": begun.teamId, "tenant.id": begun.tenantId }
  yield* Effect.annotateCurrentSpan(runAttributes)
  const approvals = yield* Approvals
  if (begun.status !== "running") {
    // Ended while it waited (cancelled, timed out): its approvals wait no more.
    yield* retryTransient(approvals.cancelRun(runId))
    return
  }
  // The engine's id of this run: the approvals' deferreds are its.
  const { executionId: workflowExecutionId } = yield* WorkflowEngine.WorkflowInstance
  const tenantId = begun.tenantId as TenantId
  const snapshot = begun.snapshot
  const room: Room.Room = {
    members: snapshot.members,
    turnTaking: snapshot.turnTaking,
    leaderAgentId: snapshot.leaderAgentId
  }
  // The time it waited for people does not count (migration 0036).
  const deadline = begun.createdAt.getTime() + snapshot.timeoutMs + begun.heldMs
  const turns: Array<Room.SpokenTurn> = []
  let tokensUsed = 0

  const roleOf = (agentId: string) => snapshot.members.find((member) => member.agentId === agentId)?.role ?? ""

  // After a wait for approvals the turn runs again as a new activity, whose loop replays what it kept.
  const speak = (index: number, speaker: string, closing?: { readonly reason: string }, after?: string) =>
    Activity.make({
      name:
        closing !== undefined
          ? `closing:${index}`
          : after === undefined
            ? `turn:${index}`
            : `turn:${index}:after:${after}`,
      success: TurnOutcome,
      error: TurnFailed,
      // A cancel stops the turn where it is, its model call aborted, on whichever node runs it.
      execute: signals.cancellable(
        runId,
        () => new TurnFailed({ message: "Cancelled" })
      )(
        Effect.gen(function* () {
          const silent = (stop: NonNullable<TurnOutcome["stop"]>): TurnOutcome => ({
            stop,
            agentId: speaker,
            content: "",
            tokens: 0,
            final: null
          })
          const fail = (message: string) => new TurnFailed({ message: storable(`Turn ${index}: ${message}`) })
          const databaseFailed = (error: { readonly message: string }) => fail(databaseFailure(error))
          const now = yield* Clock.currentTimeMillis
          // The closing turn has its own short time, past the deadline if need be.
          const allowed = closing === undefined ? deadline - now : Duration.toMillis(config.teamClosingTurnTimeout)
          if (allowed <= 0) return silent("timeout")

          // The agent is read at each turn: its model and instructions as they are now.
          const agent = yield* retryTransient(sqlErrorsTyped(agents.findById(tenantId, AgentId.make(speaker)))).pipe(
            Effect.mapError(databaseFailed)
          )
          if (Option.isNone(agent) || agent.value.status !== "active") {
            if (closing !== undefined) return silent("failed")
            return yield* fail(`agent ${speaker} is missing or inactive`)
          }
          const responseFormat = agent.value.responseFormat ?? undefined
          // The room's rules ask for text markers: a speaker held to JSON is told what its JSON stands for.
          const rules =
            responseFormat === undefined
              ? Room.systemPrompt(agent.value.instructions, room, speaker)
              : `${Room.systemPrompt(agent.value.instructions, room, speaker)}\n\n` +
                `Reply with only JSON matching the JSON Schema "${responseFormat.name}": ` +
                (closing === undefined
                  ? "it is your contribution to the room; it neither ends the mission nor names who speaks next."
                  : "it is the mission's final answer.")
          const bare = Room.userPrompt({
            room,
            mission: begun.mission,
            speaker,
            transcript: [],
            omitted: 0,
            turns,
            closing
          })
          // An agent with knowledge is grounded on what it holds for the mission and the latest turn, within half
          // of what the rules and the bare prompt leave; the transcript gets the rest.
          const { system } = yield* retryTransient(
            sqlErrorsTyped(
              knowledge.ground({
                tenantId,
                instructions: rules,
                knowledgeIds: agent.value.knowledgeIds,
                query: turns.length === 0 ? begun.mission : `${begun.mission}\n${turns[turns.length - 1]!.content}`,
                budget: () =>
                  Math.floor(
                    (models.contextBudget(agent.value.model) - models.countTokens(rules) - models.countTokens(bare)) / 2
                  )
              })
            )
          ).pipe(Effect.mapError(databaseFailed))
          // The transcript is trimmed from its oldest turn to what the model's context holds.
          const room_budget =
            models.contextBudget(agent.value.model) - models.countTokens(system) - models.countTokens(bare)
          const trimmed = Room.trimTranscript(
            turns.map((turn) => Room.transcriptLine(room, turn)),
            Math.max(0, room_budget),
            models.countTokens
          )
          const prompt = Room.userPrompt({
            room,
            mission: begun.mission,
            speaker,
            transcript: trimmed.kept,
            omitted: trimmed.omitted,
            turns,
            closing
          })
          const promptTokens = models.countTokens(system) + models.countTokens(prompt)
          if (closing === undefined) {
            const estimate = promptTokens + replyTokensEstimate
            if (tokensUsed + estimate > snapshot.tokenBudget) return silent("token_budget")
          }
          // The speaker's tools, as they are now; the closing turn writes the final answer from the transcript alone.
          const tools =
            closing === undefined
              ? yield* retryTransient(sqlErrorsTyped(agentTools.toolsOf(tenantId, agent.value.toolIds))).pipe(
                  Effect.mapError(databaseFailed)
                )
              : []
          // Every model call of the turn, the closing one's too, reserves its
          // worst case of the tenant's day (the plan read now) before it is made.
          const reserve = (promptTokens: number) =>
            retryTransient(sqlErrorsTyped(budget.reserve(tenantId, { model: agent.value.model, promptTokens }))).pipe(
              Effect.mapError((error) =>
                error._tag === "TokenBudgetSpent" || error._tag === "ModelNotAllowed" ? error : databaseFailed(error)
              )
            )
          // `turn.started` is logged once the turn's first call is reserved.
          let started = after !== undefined
          // The loop's tokens so far: past the first call, a round of calls
          // that would cross the team's token budget is not offered, the model
          // is asked for its answer (an estimate, as before a turn).
          let spent = 0
          const choiceWithin = (request: LoopModelRequest, requested: number) =>
            request.tools !== undefined &&
            spent > 0 &&
            tokensUsed + spent + requested + replyTokensEstimate > snapshot.tokenBudget
              ? ("none" as const)
              : request.toolChoice
          const callModel = (request: LoopModelRequest) => {
            const requested = requestTokens(models, agent.value.model, request)
            return budget
              .reserving(
                reserve(requested),
                (held) =>
                  Effect.andThen(
                    started
                      ? Effect.void
                      : retryTransient(
                          repo.turnEvent(runId, "turn.started", index, {
                            index,
                            agentId: speaker,
                            closing: closing !== undefined
                          })
                        ).pipe(
                          Effect.mapError(databaseFailed),
                          Effect.tap(() =>
                            Effect.sync(() => {
                              started = true
                            })
                          )
                        ),
                    models.generate({
                      ...request,
                      toolChoice: choiceWithin(request, requested),
                      model: agent.value.model,
                      maxOutputTokens: held.maxOutputTokens
                    })
                  ),
                (reply, held) =>
                  retryTransient(sqlErrorsTyped(budget.settle(held, reply.inputTokens + reply.outputTokens))).pipe(
                    Effect.mapError(databaseFailed),
                    Effect.as(reply)
                  )
              )
              .pipe(
                Effect.tap((reply) =>
                  Effect.sync(() => {
                    spent += reply.inputTokens + reply.outputTokens
                  })
                )
              )
          }
          // The closing turn (no tools) is kept apart from the turn it may stand in for.
          const scope = closing === undefined ? turnScope(index) : `closing-${index}`
          // The turn's tokens are settled call by call before it is stored. Without tools the loop is one model
          // call with nothing to replay: not durable, it reads nothing either.
          const reply = yield* loop
            .run({
              key: { tenantId, runKind: "team_run", runId, scope },
              durable: tools.length > 0,
              system,
              messages: [{ role: "user", content: prompt }],
              tools,
              agentChain: [speaker],
              askAgent: agentTools.askAgent({ tenantId, runKind: "team_run", runId, scope }),
              callModel,
              responseFormat,
              approvals:
                closing === undefined
                  ? loopApprovals(approvals, {
                      workflow: TeamRunWorkflow,
                      workflowExecutionId,
                      tenantId,
                      runKind: "team_run",
                      runId,
                      scope,
                      owner: { kind: "team", id: begun.teamId }
                    })
                  : undefined,
              emit: (event) =>
                retryTransient(
                  repo.toolEvent(runId, event.type, index, {
                    index,
                    callId: event.callId,
                    tool: event.tool,
                    ...event.data
                  })
                ).pipe(Effect.orDie)
            })
            .pipe(
              Effect.map(Option.some),
              Effect.timeoutOrElse({ duration: Duration.millis(allowed), orElse: () => Effect.succeed(Option.none()) }),
              Effect.catch((error) => {
                switch (error._tag) {
                  // The closing turn fails quietly: the run ends with what it has.
                  case "ModelError":
                    return closing === undefined ? Effect.fail(fail(error.message)) : Effect.succeed(Option.none())
                  case "TokenBudgetSpent":
                  case "ModelNotAllowed":
                    return closing === undefined
                      ? Effect.fail(fail(error.detail ?? error.title))
                      : Effect.succeed(Option.none())
                  default:
                    return Effect.fail(error)
                }
              })
            )
          if (Option.isNone(reply)) return silent(closing === undefined ? "timeout" : "failed")
          // Its tokens are counted when the turn runs again and replays these model turns.
          if (reply.value.waitingFor !== undefined)
            return { ...silent("timeout"), stop: null, waitingFor: reply.value.waitingFor }
          if (reply.value.invalidOutput !== undefined) {
            const mismatch =
              `the reply does not match the response format "${responseFormat!.name}": ` +
              describeProblems(reply.value.invalidOutput)
            if (closing === undefined) return yield* fail(mismatch)
            // The closing turn fails quietly, as on a model error: the run ends with what it has.
            yield* Effect.logWarning(`Team closing turn dropped: ${mismatch}`).pipe(
              Effect.annotateLogs({ runId, turn: index })
            )
            return silent("failed")
          }
          const content = storable(reply.value.reply.text)
          const tokens = reply.value.tokens
          // A JSON turn declares nothing: the closing turn's JSON is the result as it is.
          const declared = responseFormat === undefined ? Room.finalAnswer(content) : undefined
          const final =
            closing !== undefined ? (declared ?? content) : Room.mayFinish(room, speaker) ? (declared ?? null) : null
          yield* retryTransient(
            repo.saveTurn({ tenantId, runId, index, agentId: speaker, role: roleOf(speaker), content, tokens })
          ).pipe(Effect.mapError(databaseFailed))
          yield* retryTransient(
            repo.turnEvent(runId, "turn.completed", index, {
              index,
              agentId: speaker,
              role: roleOf(speaker),
              content,
              tokens
            })
          ).pipe(Effect.mapError(databaseFailed))
          yield* Effect.logInfo("Team turn completed").pipe(Effect.annotateLogs({ runId, turn: index }))
          return { stop: null, agentId: speaker, content, tokens, final } satisfies TurnOutcome
        }).pipe(
          Traced.withSpan("TeamRunWorkflow.turn", {
            attributes: {
              ...runAttributes,
              "team_run.turn.index": index,
              "team_run.turn.closing": closing !== undefined,
              "agent.id": speaker
            }
          })
        )
      )
    })

  const conversation = Effect.gen(function* () {
    for (let index = 0; index < snapshot.maxTurns; index++) {
      const speaker = Room.nextSpeaker(room, turns)
      let outcome = yield* speak(index, speaker)
      while (outcome.waitingFor !== undefined && outcome.waitingFor.length > 0) {
        for (const id of outcome.waitingFor) yield* awaitApproval(approvals, id)
        outcome = yield* speak(index, speaker, undefined, outcome.waitingFor[outcome.waitingFor.length - 1])
      }
      if (outcome.stop === "timeout" || outcome.stop === "token_budget") return outcome.stop
      turns.push({ index, agentId: outcome.agentId, content: outcome.content })
      tokensUsed += outcome.tokens
      if (outcome.final !== null) return { done: outcome.final }
    }
    return "max_turns" as const
  })

  /** The run's final status, with the turns and tokens it took. */
  const finish = (
    to: "completed" | "failed",
    fields: {
      readonly result?: string
      readonly error?: string
      readonly stopReason: StopReason
    }
  ) => retryTransient(finishRun(runId, to, { ...fields, turns: turns.length, tokensUsed }))

  /**
   * The result's approval, asked for once (a replay finds the one it wrote).
   * While it waits, the run is `waiting`, which the timeout sweep leaves alone.
   */
  const requestResultApproval = (result: string, setting: ResultApproval) =>
    Activity.make({
      name: "result-approval",
      success: Schema.String,
      execute: Effect.gen(function* () {
        const id = newId()
        const stored = yield* retryTransient(
          approvals.request({
            id,
            kind: "result",
            wakeToken: tokenFor(TeamRunWorkflow, workflowExecutionId, id),
            tenantId,
            runKind: "team_run",
            runId,
            scope: "result",
            callId: "result",
            owner: { kind: "team", id: begun.teamId },
            toolId: null,
            tool: "result",
            arguments: { result },
            reason: null,
            timeoutMs: setting.timeoutMs,
            onExpiry: setting.onExpiry
          })
        ).pipe(Effect.orDie)
        return stored.approval.id
      })
    })

  /** The run completes with its result, once a person approved it when the team asks for that. */
  const complete = (result: string, stopReason: StopReason) =>
    Effect.gen(function* () {
      const setting = snapshot.resultApproval
      if (setting === undefined || !setting.required) return yield* finish("completed", { result, stopReason })
      const id = yield* requestResultApproval(result, setting)
      yield* awaitApproval(approvals, id)
      const decided = yield* approvals.forId(id)
      // Cancelled: the run ended while it waited.
      if (decided === undefined || decided.status === "cancelled") return
      if (decided.status === "approved") {
        const edited = decided.editedArguments?.result
        return yield* finish("completed", {
          result: typeof edited === "string" ? storable(edited) : result,
          stopReason
        })
      }
      return yield* finish("failed", { error: storable(notApproved(decided)), stopReason: "error" })
    })

  const outcome = yield* Effect.result(conversation)
  if (Result.isFailure(outcome)) {
    yield* finish("failed", { error: outcome.failure.message, stopReason: "error" })
    return
  }
  if (typeof outcome.success === "object") {
    yield* complete(outcome.success.done, "done")
    return
  }
  // At a limit: one short closing turn writes the final answer.
  const stopReason = outcome.success
  const index = turns.length
  const closing = yield* Effect.result(
    speak(index, Room.closingSpeaker(room, turns), { reason: limitText[stopReason] })
  )
  let result = turns.at(-1)?.content ?? ""
  if (Result.isSuccess(closing) && closing.success.stop === null) {
    turns.push({ index, agentId: closing.success.agentId, content: closing.success.content })
    tokensUsed += closing.success.tokens
    result = closing.success.final ?? closing.success.content
  }
  yield* complete(result, stopReason)
})

/**
 * Whatever ended the run without a final status (a database error that
 * outlived its retries, a defect) fails it with the reason. Interruptions (a
 * cancel, a node stopping) pass: the run resumes elsewhere.
 */
const failUnfinished = (runId: string) => (cause: Cause.Cause<unknown>) =>
  Effect.gen(function* () {
    if (Cause.hasInterrupts(cause)) return yield* Effect.interrupt
    const error = Cause.squash(cause)
    const message = isSqlError(error) ? databaseFailure(error) : "The run failed unexpectedly"
    yield* Effect.logError("Team run failed unexpectedly", cause).pipe(Effect.annotateLogs({ runId }))
    yield* retryTransient(finishRun(runId, "failed", { error: message, stopReason: "error" })).pipe(
      Effect.catchCause((cause) =>
        Effect.logError("Could not record a team run's failure; it fails at its timeout", cause).pipe(
          Effect.annotateLogs({ runId })
        )
      )
    )
  })

/** Counts the workflows running on this node while they run. */
export const layer = TeamRunWorkflow.toLayer((payload) =>
  Effect.acquireUseRelease(
    Metric.modify(Metrics.workflowsInFlight, 1),
    // The run waits for, then holds, one of its tenant's running slots.
    () =>
      Effect.gen(function* () {
        return yield* (yield* RunSlots).hold("team_run", payload.runId)(run(payload))
      }).pipe(Effect.catchCause(failUnfinished(payload.runId))),
    () => Metric.modify(Metrics.workflowsInFlight, -1)
  )
)
