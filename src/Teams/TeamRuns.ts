import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Crypto from "node:crypto"
import { Approvals } from "../Approvals/Approvals.ts"
import { defaultPageSize, type PageRequest } from "../Domain/Page.ts"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import { decodeCursor } from "../Domain/Cursor.ts"
import { isId, type TenantId } from "../Domain/Ids.ts"
import { Conflict, invalidField, NotFound } from "../Domain/Problems.ts"
import * as DurableRuns from "../Runtime/DurableRuns.ts"
import { EventStreams } from "../Http/EventStreams.ts"
import { ToolCallsRepo } from "../Tools/CallsRepo.ts"
import type { ToolCallRecord } from "../Tools/ToolCall.ts"
import {
  isTranscriptIndex,
  RunNotStarted,
  type RunRequest,
  type RunStatus,
  type TeamRun,
  type TranscriptEntry
} from "./Api.ts"
import { TeamsRepo } from "./Repo.ts"
import { finishRun, reapTimedOut, TeamRunWorkflow, turnScope } from "./TeamRunWorkflow.ts"
import { Teams, withinPlan } from "./Teams.ts"
import type { Webhooks } from "../Webhooks/Webhooks.ts"
import * as Traced from "../Observability/Traced.ts"

const requestHash = (teamId: string, request: RunRequest) =>
  Crypto.createHash("sha256")
    .update(JSON.stringify([teamId, request.mission]))
    .digest("hex")

/** Starting, reading, listing and cancelling team runs, and their sweeps. */
export class TeamRuns extends Context.Service<TeamRuns>()("agent-host/TeamRuns", {
  make: Effect.gen(function* () {
    // What finishing a run needs (its read model and the room's webhook outbox).
    const finishing = yield* Effect.context<TeamsRepo | Webhooks>()
    const teams = yield* Teams
    const repo = yield* TeamsRepo
    const toolCalls = yield* ToolCallsRepo
    const config = yield* AppConfig
    const runs = yield* DurableRuns.runsOf({
      notStarted: (runId) => new RunNotStarted({ detail: "The run is stored and will start shortly", runId }),
      workflow: TeamRunWorkflow,
      payload: (runId) => ({ runId }),
      slots: "team_run",
      what: "A team run",
      answer: (claimed, status) => ({ runId: claimed.id, status, mode: "chat" as const }),
      finalEvents: ["run.completed", "run.failed", "run.cancelled"],
      repo,
      // DurableRunRepo.events reads at most 500.
      eventsPageSize: 500,
      retention: (config) => config.teamRunMessagesRetention
    })

    const start = Traced.fn("TeamRuns.start")(function* (
      tenantId: TenantId,
      teamId: string,
      { payload: request, headers }: DurableRuns.StartRequest<RunRequest>
    ) {
      if (request.mission.trim() === "") return yield* invalidField("mission", "Expected a non-empty mission")
      if (request.mission.length > config.maxMessageChars) {
        return yield* invalidField(
          "mission",
          `Expected at most ${config.maxMessageChars} characters (MAX_MESSAGE_CHARS)`
        )
      }
      return yield* runs.accept(tenantId, headers, {
        hash: () => requestHash(teamId, request),
        prepare: Effect.gen(function* () {
          // A team set under a larger plan runs within this plan's bounds.
          const team = withinPlan(yield* teams.active(tenantId, teamId), (yield* teams.boundsOf(tenantId)).bounds)
          // The members' names are fixed with the rest; their models and instructions are read at each turn.
          const agents = yield* repo.agentsAmong(
            tenantId,
            team.members.map((member) => member.agentId)
          )
          return (run: DurableRuns.NewRun) =>
            repo.insertRun({
              ...run,
              teamId: team.id,
              mission: request.mission,
              snapshot: {
                members: team.members.map((member) => ({
                  ...member,
                  name: agents.get(member.agentId)?.name ?? member.agentId
                })),
                turnTaking: team.turnTaking,
                leaderAgentId: team.leaderAgentId,
                maxTurns: team.maxTurns,
                tokenBudget: team.tokenBudget,
                timeoutMs: team.timeoutMs,
                resultApproval: team.resultApproval
              }
            })
        })
      })
    })

    /** The team must be the tenant's (any status: its runs stay readable). */
    const ensureTeam = (tenantId: TenantId, teamId: string) =>
      Effect.flatMap(repo.findById(tenantId, teamId), (team) =>
        Option.isNone(team) ? Effect.fail(new NotFound({ detail: `No team ${teamId}` })) : Effect.void
      )

    /** The page's turns, each with the tool calls it made (none: no `toolCalls`). */
    const withToolCalls = <P extends { readonly data: ReadonlyArray<typeof TranscriptEntry.Type> }>(
      tenantId: TenantId,
      runId: string,
      page: P
    ) =>
      Effect.gen(function* () {
        if (page.data.length === 0) return page
        const calls = yield* Effect.orDie(toolCalls.callsOf(tenantId, runId))
        if (calls.length === 0) return page
        const byScope = new Map<string, Array<ToolCallRecord>>()
        for (const call of calls) {
          const made = byScope.get(call.scope)
          if (made === undefined) byScope.set(call.scope, [call])
          else made.push(call)
        }
        return {
          ...page,
          data: page.data.map((entry) => {
            const made = byScope.get(turnScope(entry.index))
            return made === undefined ? entry : { ...entry, toolCalls: made }
          })
        }
      })

    const transcript = Traced.fn("TeamRuns.transcript")(function* (
      tenantId: TenantId,
      teamId: string,
      runId: string,
      query: PageRequest
    ) {
      yield* findRun(tenantId, teamId, runId)
      const after = yield* decodeCursor(query.cursor, isTranscriptIndex)
      const page = yield* repo.transcript(
        tenantId,
        runId,
        after === null ? null : Number(after),
        query.limit ?? defaultPageSize
      )
      return yield* withToolCalls(tenantId, runId, page)
    })

    /** One tool call of a turn of the run, with its whole result (a failed call's is null). */
    const toolCall = Traced.fn("TeamRuns.toolCall")(function* (
      tenantId: TenantId,
      teamId: string,
      runId: string,
      turn: string,
      callId: string
    ) {
      yield* findRun(tenantId, teamId, runId)
      const found = isTranscriptIndex(turn)
        ? yield* toolCalls.tenantCall(tenantId, "team_run", runId, turnScope(Number(turn)), callId).pipe(Effect.orDie)
        : Option.none()
      if (Option.isNone(found)) {
        return yield* new NotFound({ detail: `No tool call ${callId} of turn ${turn} of run ${runId}` })
      }
      const { fullResult, record } = found.value
      return { ...record, fullResult: record.status === "succeeded" ? (fullResult ?? record.result) : null }
    })

    const findRun = Traced.fn("TeamRuns.find")(function* (tenantId: TenantId, teamId: string, runId: string) {
      const run = yield* repo.getRun(tenantId, teamId, runId)
      if (Option.isNone(run)) return yield* new NotFound({ detail: `No run ${runId} of team ${teamId}` })
      return run.value
    })

    const withWaiting = <R extends TeamRun>(tenantId: TenantId, teamRuns: ReadonlyArray<R>) =>
      runs.withWaiting(tenantId, teamRuns, (run) => run.runId)

    const get = Traced.fn("TeamRuns.get")(function* (tenantId: TenantId, teamId: string, runId: string) {
      const [run] = yield* withWaiting(tenantId, [yield* findRun(tenantId, teamId, runId)])
      const firstPage = yield* repo.transcript(tenantId, runId, null, defaultPageSize)
      return { ...run!, transcript: yield* withToolCalls(tenantId, runId, firstPage) }
    })

    const list = Traced.fn("TeamRuns.list")(function* (
      tenantId: TenantId,
      teamId: string,
      query: PageRequest & { readonly status?: RunStatus | undefined }
    ) {
      yield* ensureTeam(tenantId, teamId)
      const before = yield* decodeCursor(query.cursor, isId)
      const page = yield* repo.runs(tenantId, teamId, query.status ?? null, before, query.limit ?? defaultPageSize)
      return { ...page, data: yield* withWaiting(tenantId, page.data) }
    })

    const cancel = Traced.fn("TeamRuns.cancel")(function* (tenantId: TenantId, teamId: string, runId: string) {
      const run = yield* findRun(tenantId, teamId, runId)
      if (DurableRuns.isFinal(run.status)) return yield* new Conflict({ detail: `The run is already ${run.status}` })
      const cancelled = yield* finishRun(runId, "cancelled", { error: "Cancelled", stopReason: "cancelled" }).pipe(
        Effect.provideContext(finishing),
        Effect.orDie
      )
      if (!cancelled) return yield* new Conflict({ detail: "The run has just finished" })
      // The turn in flight is aborted; the read model already says cancelled for good.
      yield* runs.stop(runId)
      // Its tool calls in flight were stopped with it.
      yield* Effect.orDie(toolCalls.cancelRunning(runId))
      // Its approvals (its result's too) wait no more (docs/approvals.md).
      yield* (yield* Approvals).cancelRun(runId)
      return yield* findRun(tenantId, teamId, runId)
    })

    /**
     * The run's events as they happen: what is logged already, then what
     * follows (woken by its notifications), until the final event; resumes after
     * `lastEventId`. At most EVENT_STREAM_MAX_DURATION, never past the run's
     * timeout plus its closing turn; then a `stream.end` event says why.
     */
    const events = Traced.fn("TeamRuns.events")(function* (
      tenantId: TenantId,
      teamId: string,
      runId: string,
      lastEventId: string
    ) {
      const deadline = yield* repo.deadline(tenantId, teamId, runId)
      if (Option.isNone(deadline)) return yield* new NotFound({ detail: `No run ${runId} of team ${teamId}` })
      return yield* runs.follow(tenantId, runId, lastEventId, {
        at: deadline.value + Duration.toMillis(config.teamClosingTurnTimeout) + 2_000,
        reason: "runTimeout"
      })
    })

    // Past its timeout, its closing turn and a few seconds for a live run to record its own end.
    const sweeps = runs.sweeps(
      Effect.gen(function* () {
        const ids = yield* reapTimedOut(Duration.toSeconds(config.teamClosingTurnTimeout) + 5).pipe(
          Effect.provideContext(finishing),
          Effect.orDie
        )
        if (ids.length > 0) {
          yield* Effect.logWarning("Team runs past their timeout failed by the sweep").pipe(
            Effect.annotateLogs({ count: ids.length })
          )
        }
        return ids
      })
    )

    /** Cancels every unfinished run of the team (it is being deleted). */
    const cancelUnfinished = Traced.fn("TeamRuns.cancelUnfinished")(function* (tenantId: TenantId, teamId: string) {
      const ids = yield* repo.unfinishedOf(tenantId, teamId)
      yield* Effect.forEach(
        ids,
        (runId) =>
          cancel(tenantId, teamId, runId).pipe(
            // A run that finished meanwhile is as good as cancelled here.
            Effect.catchTag("Conflict", () => Effect.void)
          ),
        { concurrency: 5, discard: true }
      )
    })

    return { start, get, list, transcript, toolCall, cancel, cancelUnfinished, events, sweeps } as const
  })
}) {
  /** The sweeps of team runs (DurableRuns.sweeper), a cluster singleton. */
  static readonly sweeper = DurableRuns.sweeper(
    "TeamRunsSweep",
    "Team runs",
    TeamRuns.useSync((s) => s.sweeps)
  )

  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([Teams.layer, TeamsRepo.layer, ToolCallsRepo.layer, TokenBudget.layer, EventStreams.layer])
  )
}
