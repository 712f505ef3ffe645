import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Sharding from "effect/cluster/Sharding"
import * as WorkflowEngine from "effect/workflow/WorkflowEngine"
import * as Crypto from "node:crypto"
import { defaultPageSize } from "../Domain/Page.ts"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import { decodeCursor } from "../Domain/Cursor.ts"
import { isId, newId, type TenantId } from "../Domain/Ids.ts"
import { Conflict, invalidField, NotFound } from "../Domain/Problems.ts"
import * as ClusterStorage from "../Runtime/ClusterStorage.ts"
import * as DurableRuns from "../Runtime/DurableRuns.ts"
import { EventStreams } from "../Http/EventStreams.ts"
import { RunSignals } from "../Runtime/RunSignals.ts"
import { refuseRunning, RunSlots } from "../Runtime/RunSlots.ts"
import { isTranscriptIndex, RunNotStarted, type RunRequest, type RunStatus, type TeamRun } from "./Api.ts"
import { type Claimed, TeamsRepo } from "./Repo.ts"
import { finishRun, reapTimedOut, TeamRunWorkflow } from "./TeamRunWorkflow.ts"
import { Teams, withinPlan } from "./Teams.ts"
import type { Webhooks } from "../Webhooks/Webhooks.ts"
import * as Traced from "../Observability/Traced.ts"

export interface RunEvent {
  readonly id: string
  readonly type: string
  readonly turn: number | null
  readonly data: unknown
  readonly createdAt: Date
}

/** The last event of a stream that ran out of time before the run finished. */
export interface StreamEnd {
  readonly type: "stream.end"
  readonly reason: "maxDuration" | "runTimeout"
}

const finalEvents = new Set(["run.completed", "run.failed", "run.cancelled"])

const isFinal = (status: RunStatus) => status === "completed" || status === "failed" || status === "cancelled"

const requestHash = (teamId: string, request: RunRequest) =>
  Crypto.createHash("sha256")
    .update(JSON.stringify([teamId, request.mission]))
    .digest("hex")

/** Starting, reading, listing and cancelling team runs, and their sweeps. */
export class TeamRuns extends Context.Service<TeamRuns>()("agent-host/TeamRuns", {
  make: Effect.gen(function* () {
    const teams = yield* Teams
    const repo = yield* TeamsRepo
    const engine = yield* WorkflowEngine.WorkflowEngine
    const config = yield* AppConfig
    const budget = yield* TokenBudget
    const streams = yield* EventStreams
    const sharding = yield* Sharding.Sharding
    const tables = yield* ClusterStorage.ClusterTables
    const localStart = tables.startMessage(TeamRunWorkflow)
    const runSlots = yield* RunSlots
    const signals = yield* RunSignals
    // What finishing a run needs (its read model and the room's webhook outbox).
    const finishing = yield* Effect.context<TeamsRepo | Webhooks>()

    const startWorkflow = (runId: string) =>
      TeamRunWorkflow.execute({ runId }, { discard: true }).pipe(
        Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
        Effect.asVoid
      )

    // An Idempotency-Key that names a run already accepted: that run, or a 409 for another request.
    const replayOf = (claimed: Claimed, hash: string | null) =>
      claimed.requestHash !== hash
        ? Effect.fail(new Conflict({ detail: "This Idempotency-Key was used with a different request" }))
        : Effect.succeed({ runId: claimed.id, status: claimed.status, mode: "chat" as const })

    const start = Traced.fn("TeamRuns.start")(function* (
      tenantId: TenantId,
      teamId: string,
      request: RunRequest,
      idempotencyKey: string | undefined,
      // False (`Prefer: wait=0`): refused with a 429 rather than queued when the tenant's runs are at its cap.
      wait = true
    ) {
      if (request.mission.trim() === "") return yield* invalidField("mission", "Expected a non-empty mission")
      if (request.mission.length > config.maxMessageChars) {
        return yield* invalidField(
          "mission",
          `Expected at most ${config.maxMessageChars} characters (MAX_MESSAGE_CHARS)`
        )
      }
      const hash = idempotencyKey === undefined ? null : requestHash(teamId, request)
      // A spent token budget refuses a new run up front (each turn checks
      // again), but not the replay of one accepted before.
      const spent = yield* budget
        .admitWork(tenantId)
        .pipe(Effect.as(undefined), Effect.catchTag("TokenBudgetSpent", Effect.succeed))
      if (spent !== undefined) {
        const earlier = idempotencyKey === undefined ? Option.none() : yield* repo.claimedBy(tenantId, idempotencyKey)
        if (Option.isNone(earlier)) return yield* spent
        return yield* replayOf(earlier.value, hash)
      }
      // A team set under a larger plan runs within this plan's bounds.
      const team = withinPlan(yield* teams.active(tenantId, teamId), (yield* teams.boundsOf(tenantId)).bounds)
      // The members' names are fixed with the rest; their models and instructions are read at each turn.
      const agents = yield* repo.agentsAmong(
        tenantId,
        team.members.map((member) => member.agentId)
      )
      const id = newId()
      // As an execute's (Executions.start): without a key, a run this node
      // will run is stored with its workflow's start request.
      const startRequest =
        idempotencyKey === undefined && Duration.isGreaterThan(config.clusterCallTimeout, Duration.zero)
          ? yield* localStart({ runId: id })
          : undefined
      if (!wait) {
        const refused = yield* runSlots.reserve("team_run", tenantId, id)
        if (refused !== undefined) return yield* refuseRunning(refused.refusedAt)
      }
      const claimed = yield* DurableRuns.startStored({
        insert: repo.insertRun({
          id,
          tenantId,
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
            timeoutMs: team.timeoutMs
          },
          idempotencyKey: idempotencyKey ?? null,
          requestHash: hash,
          startRequest
        }),
        start: startWorkflow,
        poll: sharding.pollStorage,
        workflow: TeamRunWorkflow._tag,
        timeout: config.clusterCallTimeout,
        notStarted: (runId) => new RunNotStarted({ detail: "The run is stored and will start shortly", runId }),
        what: "A team run"
      })
      if (!claimed.fresh) {
        if (!wait) yield* runSlots.release(id)
        return yield* replayOf(claimed, hash)
      }
      return { runId: claimed.id, status: "pending" as const, mode: "chat" as const }
    })

    /** The team must be the tenant's (any status: its runs stay readable). */
    const ensureTeam = (tenantId: TenantId, teamId: string) =>
      Effect.flatMap(repo.findById(tenantId, teamId), (team) =>
        Option.isNone(team) ? Effect.fail(new NotFound({ detail: `No team ${teamId}` })) : Effect.void
      )

    const transcript = Traced.fn("TeamRuns.transcript")(function* (
      tenantId: TenantId,
      teamId: string,
      runId: string,
      query: {
        readonly limit?: number | undefined
        readonly cursor?: string | undefined
      }
    ) {
      yield* findRun(tenantId, teamId, runId)
      const after = yield* decodeCursor(query.cursor, isTranscriptIndex)
      return yield* repo.transcript(
        tenantId,
        runId,
        after === null ? null : Number(after),
        query.limit ?? defaultPageSize
      )
    })

    const findRun = Traced.fn("TeamRuns.find")(function* (tenantId: TenantId, teamId: string, runId: string) {
      const run = yield* repo.getRun(tenantId, teamId, runId)
      if (Option.isNone(run)) return yield* new NotFound({ detail: `No run ${runId} of team ${teamId}` })
      return run.value
    })

    // Pending runs that wait for a slot say so (one statement, only when some are pending).
    const withWaiting = <R extends TeamRun>(tenantId: TenantId, runs: ReadonlyArray<R>) =>
      Effect.map(
        runSlots.waiting(
          tenantId,
          runs.filter((run) => run.status === "pending").map((run) => run.runId)
        ),
        (waiting) =>
          runs.map((run): R => {
            const queued = waiting.get(run.runId)
            return queued === undefined
              ? run
              : { ...run, waiting: { reason: "tenant_concurrency", ahead: queued.ahead, limit: queued.limit } }
          })
      )

    const get = Traced.fn("TeamRuns.get")(function* (tenantId: TenantId, teamId: string, runId: string) {
      const [run] = yield* withWaiting(tenantId, [yield* findRun(tenantId, teamId, runId)])
      const firstPage = yield* repo.transcript(tenantId, runId, null, defaultPageSize)
      return { ...run!, transcript: firstPage }
    })

    const list = Traced.fn("TeamRuns.list")(function* (
      tenantId: TenantId,
      teamId: string,
      query: {
        readonly limit?: number | undefined
        readonly cursor?: string | undefined
      }
    ) {
      yield* ensureTeam(tenantId, teamId)
      const before = yield* decodeCursor(query.cursor, isId)
      const page = yield* repo.runs(tenantId, teamId, before, query.limit ?? defaultPageSize)
      return { ...page, data: yield* withWaiting(tenantId, page.data) }
    })

    const cancel = Traced.fn("TeamRuns.cancel")(function* (tenantId: TenantId, teamId: string, runId: string) {
      const run = yield* findRun(tenantId, teamId, runId)
      if (isFinal(run.status)) return yield* new Conflict({ detail: `The run is already ${run.status}` })
      const cancelled = yield* finishRun(runId, "cancelled", { error: "Cancelled", stopReason: "cancelled" }).pipe(
        Effect.provideContext(finishing),
        Effect.orDie
      )
      if (!cancelled) return yield* new Conflict({ detail: "The run has just finished" })
      // Whichever node runs its turn aborts the model call now; a run waiting
      // for a slot leaves the queue (effect's interrupt below only takes
      // effect when the workflow next suspends).
      yield* signals.cancel(runId)
      // The turn in flight is interrupted; the read model already says cancelled for good.
      yield* Effect.flatMap(TeamRunWorkflow.executionId({ runId }), (workflowId) =>
        TeamRunWorkflow.interrupt(workflowId)
      ).pipe(
        Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
        Effect.timeoutOrElse({
          duration: config.clusterCallTimeout,
          orElse: () => Effect.logWarning("Cancel: the team run could not be interrupted in time", { runId })
        })
      )
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
      const now = yield* Clock.currentTimeMillis
      const runEnd = deadline.value + Duration.toMillis(config.teamClosingTurnTimeout) + 2_000
      const streamEnd = now + Duration.toMillis(config.eventStreamMaxDuration)
      const end: StreamEnd = { type: "stream.end", reason: runEnd <= streamEnd ? "runTimeout" : "maxDuration" }

      // One cap for every kind of stream a tenant opens, across the cluster.
      return yield* streams.follow<RunEvent, StreamEnd>(tenantId, {
        runId,
        read: (after) => repo.events(runId, after),
        // TeamsRepo.events reads at most 500.
        pageSize: 500,
        isFinal: (type) => finalEvents.has(type),
        lastEventId,
        now,
        endsAt: Math.min(runEnd, streamEnd),
        end
      })
    })

    const sweeps: DurableRuns.Sweeps = {
      unfinished: repo.unfinished,
      // Runs waiting for a slot have started their workflows: not to be nudged.
      notStarted: (seconds, limit) =>
        Effect.flatMap(repo.notStarted(seconds, limit), (ids) =>
          Effect.map(runSlots.queuedAmong(ids), (queued) => ids.filter((id) => !queued.has(id)))
        ),
      start: startWorkflow,
      // Past its timeout, its closing turn and a few seconds for a live run to record its own end.
      reap: Effect.gen(function* () {
        const ids = yield* reapTimedOut(Duration.toSeconds(config.teamClosingTurnTimeout) + 5).pipe(
          Effect.provideContext(finishing),
          Effect.orDie
        )
        if (ids.length === 0) return
        yield* Effect.logWarning("Team runs past their timeout failed by the sweep").pipe(
          Effect.annotateLogs({ count: ids.length })
        )
        // Their model calls in flight stop, and those waiting for a slot leave the queue.
        yield* Effect.forEach(ids, signals.cancel, { discard: true })
        yield* Effect.forEach(
          ids,
          (runId) =>
            Effect.flatMap(TeamRunWorkflow.executionId({ runId }), (workflowId) =>
              TeamRunWorkflow.interrupt(workflowId)
            ).pipe(
              Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
              Effect.timeout(config.clusterCallTimeout),
              Effect.ignore
            ),
          { discard: true, concurrency: 10 }
        )
      }),
      unpruned: (limit) => repo.unpruned(Duration.toSeconds(config.teamRunMessagesRetention), limit),
      prune: (ids) =>
        Effect.flatMap(
          Effect.forEach(ids, (runId) => TeamRunWorkflow.executionId({ runId })),
          (entityIds) => Effect.orDie(tables.pruneMessages(TeamRunWorkflow, entityIds, repo.markPruned(ids)))
        )
    }

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

    return { start, get, list, transcript, cancel, cancelUnfinished, events, sweeps } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([Teams.layer, TeamsRepo.layer, TokenBudget.layer, EventStreams.layer])
  )

  /** The sweeps of team runs (DurableRuns.sweeper), a cluster singleton. */
  static readonly sweeper = DurableRuns.sweeper(
    "TeamRunsSweep",
    "Team runs",
    Effect.gen(function* () {
      return (yield* TeamRuns).sweeps
    })
  )
}
