import { PgClient } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlSchema from "effect/sql/SqlSchema"
import * as DurableRunRepo from "../Database/DurableRunRepo.ts"
import { approvalTimeoutBounds } from "../Tools/Tool.ts"
import { tenantPage } from "../Database/Page.ts"
import * as TenantRepo from "../Database/TenantRepo.ts"
import { isId, TenantId } from "../Domain/Ids.ts"
import { ResultApproval, RunStatus, type StopReason, Team, TeamRun, TranscriptEntry, TurnTaking } from "./Api.ts"
import * as ClusterStorage from "../Runtime/ClusterStorage.ts"
import * as Traced from "../Observability/Traced.ts"

/** A team's fields, as the service settles them before a write. */
export type TeamFields = Omit<Team, "id" | "createdAt" | "updatedAt">

/** What a run is given when it is accepted and keeps whatever becomes of the team. */
export const RunSnapshot = Schema.Struct({
  members: Schema.Array(Schema.Struct({ agentId: Schema.String, role: Schema.String, name: Schema.String })),
  turnTaking: TurnTaking,
  leaderAgentId: Schema.NullOr(Schema.String),
  maxTurns: Schema.Int,
  tokenBudget: Schema.Int,
  timeoutMs: Schema.Int,
  // Left out by runs accepted before the setting: not required.
  resultApproval: Schema.optionalKey(ResultApproval)
})
export type RunSnapshot = typeof RunSnapshot.Type

// A run waiting for an approval is `running` underneath, shown as `waiting` (migration 0033).
const runColumns = `id AS run_id, team_id, mode, CASE WHEN status = 'running' AND waiting THEN 'waiting' ELSE status END
  AS status, mission, result, error, stop_reason, turns, tokens_used, ${DurableRunRepo.timeColumns}`

const Begun = Schema.Struct({
  ...DurableRunRepo.begunFields(RunStatus),
  teamId: Schema.String,
  mission: Schema.String,
  snapshot: RunSnapshot
})
export type Begun = typeof Begun.Type

// What a run request with an Idempotency-Key claims or finds.
const Claimed = Schema.Struct({ ...DurableRunRepo.claimedFields(RunStatus), teamId: Schema.String })
export type Claimed = typeof Claimed.Type

/** What a run's final status is written with. */
export interface Outcome {
  readonly result?: string | null
  readonly error?: string | null
  readonly stopReason: StopReason
  readonly turns?: number
  readonly tokensUsed?: number
}

interface NewRun {
  readonly id: string
  readonly tenantId: TenantId
  readonly teamId: string
  readonly mission: string
  readonly snapshot: RunSnapshot
  readonly idempotencyKey: string | null
  readonly requestHash: string | null
  /** The workflow's start request (ClusterTables.startMessage), stored with the row when given. */
  readonly startRequest?: ClusterStorage.StartMessage | undefined
}

const decodeRuns = Schema.decodeUnknownEffect(Schema.Array(TeamRun))

/** All SQL of teams, team runs, their transcripts and events; every statement is scoped by tenant or by a run id. */
export class TeamsRepo extends Context.Service<TeamsRepo>()("agent-host/TeamsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* PgClient.PgClient
    const runCols = sql.literal(runColumns)
    const durableRuns = DurableRunRepo.make(sql, { table: "team_runs", spanPrefix: "TeamsRepo" })
    const keyed = DurableRunRepo.keyed(sql, {
      table: "team_runs",
      spanPrefix: "TeamsRepo",
      returning: "id, team_id, status, request_hash",
      claimed: Claimed
    })
    const teams = yield* TenantRepo.make(Team, {
      table: "teams",
      spanPrefix: "TeamsRepo",
      jsonb: ["members", "resultApproval"],
      filters: { active: "status = 'active'" }
    })

    // The one read of another feature's table: the tenant's agents among `ids`, in one statement.
    const agentsAmong = (tenantId: TenantId, ids: ReadonlyArray<string>) =>
      sql<{ id: string; name: string; status: string }>`
        SELECT id, name, status FROM agents WHERE tenant_id = ${tenantId} AND id IN ${sql.in(ids)}`.pipe(
        Effect.map((rows) => new Map(rows.map((row) => [row.id, row]))),
        Effect.orDie,
        Traced.withSpan("TeamsRepo.agentsAmong")
      )

    // --- runs ----------------------------------------------------------------

    /**
     * Stores a new run, or finds the one its idempotency key already names
     * (keys last 24 hours). Committed before the 202 is sent.
     */
    const insertRunValues = (input: NewRun) =>
      sql`INSERT INTO team_runs (id, tenant_id, team_id, mode, status, mission, snapshot, timeout_ms,
                                 idempotency_key, request_hash)
          VALUES (${input.id}, ${input.tenantId}, ${input.teamId}, 'chat', 'pending', ${input.mission},
                  ${sql.json(input.snapshot)}, ${input.snapshot.timeoutMs}, ${input.idempotencyKey},
                  ${input.requestHash})`
    const decodeClaimed = Schema.decodeUnknownEffect(Claimed)
    /**
     * Stores a new run, or finds the one its idempotency key already names.
     * A run without a key whose workflow this node runs is stored with its
     * workflow's start request (ClusterTables.startMessage), in one statement:
     * `started` tells it went with the row.
     */
    const insertRun = (input: NewRun): Effect.Effect<Claimed & { readonly started?: boolean }> =>
      (input.startRequest !== undefined && input.idempotencyKey === null
        ? ClusterStorage.storedWithStarts(sql, keyed.fresh(insertRunValues(input)), [input.startRequest]).pipe(
            Effect.flatMap((rows) => decodeClaimed(rows[0])),
            Effect.map((claimed) => ({ ...claimed, started: true }))
          )
        : keyed.claim(input.tenantId, input.idempotencyKey, insertRunValues(input))
      ).pipe(Effect.orDie, Traced.withSpan("TeamsRepo.insertRun"))

    const getRun = SqlSchema.findOneOption({
      Request: Schema.Struct({ tenantId: Schema.String, teamId: Schema.String, runId: Schema.String }),
      Result: TeamRun,
      execute: ({ tenantId, teamId, runId }) =>
        sql`SELECT ${runCols} FROM team_runs WHERE tenant_id = ${tenantId} AND team_id = ${teamId} AND id = ${runId}`
    })

    const runs = (tenantId: TenantId, teamId: string, status: RunStatus | null, before: string | null, limit: number) =>
      tenantPage({
        table: "team_runs",
        columns: runColumns,
        row: TeamRun,
        tenantId,
        filters: [
          sql`team_id = ${teamId}`,
          // `waiting` is shown, not stored: a running run waiting for an approval (runColumns).
          ...(status === null
            ? []
            : status === "waiting"
              ? [sql`status = 'running' AND waiting`]
              : status === "running"
                ? [sql`status = 'running' AND NOT waiting`]
                : [sql`status = ${status}`])
        ],
        keyOf: (run) => run.runId,
        order: "desc",
        after: before,
        limit
      }).pipe(Effect.orDie, Traced.withSpan("TeamsRepo.runs"))

    const transcript = (tenantId: TenantId, runId: string, after: number | null, limit: number) =>
      tenantPage({
        table: "team_run_turns",
        columns: "index, agent_id, role, content, tokens, created_at",
        row: TranscriptEntry,
        tenantId,
        filters: [sql`run_id = ${runId}`],
        key: "index",
        keyOf: (entry) => String(entry.index),
        after,
        limit
      }).pipe(Effect.orDie, Traced.withSpan("TeamsRepo.transcript"))

    // Moves a pending run to running (with its event) and returns what it was
    // given, fixed when it was accepted, in one statement. A run already
    // running is left as it is; a finished one comes back as it is.
    const begin = durableRuns.begin({
      result: Begun,
      returning: "id",
      event: sql`INSERT INTO team_run_events (run_id, type, data)
        SELECT id, 'run.running', '{"status":"running"}'::jsonb FROM started`,
      columns: "team_id, mission, snapshot"
    })

    /** The turn's transcript row: written again, not twice, when a turn runs again after a crash. */
    const saveTurn = (turn: {
      readonly tenantId: string
      readonly runId: string
      readonly index: number
      readonly agentId: string
      readonly role: string
      readonly content: string
      readonly tokens: number
    }) =>
      sql`INSERT INTO team_run_turns (run_id, index, tenant_id, agent_id, role, content, tokens)
          VALUES (${turn.runId}, ${turn.index}, ${turn.tenantId}, ${turn.agentId}, ${turn.role}, ${turn.content}, ${turn.tokens})
          ON CONFLICT (run_id, index) DO UPDATE SET agent_id = excluded.agent_id, role = excluded.role,
            content = excluded.content, tokens = excluded.tokens, created_at = now()`.pipe(
        Effect.asVoid,
        Traced.withSpan("TeamsRepo.saveTurn")
      )

    /** Logs a turn's progress, and keeps the run's counters where the transcript is. */
    const turnEvent = (runId: string, type: "turn.started" | "turn.completed", turn: number, data: object) =>
      sql`WITH counted AS (
            UPDATE team_runs SET
              turns = CASE WHEN ${type} = 'turn.completed' THEN GREATEST(turns, ${turn + 1}) ELSE turns END
            WHERE id = ${runId} AND status = 'running'
            RETURNING id
          )
          INSERT INTO team_run_events (run_id, type, turn, data)
          VALUES (${runId}, ${type}, ${turn}, ${sql.json(data)})`.pipe(
        Effect.asVoid,
        Traced.withSpan("TeamsRepo.turnEvent")
      )

    /** Logs a tool call of a turn's loop: `tool.called`, then `tool.succeeded` or `tool.failed`. */
    const toolEvent = (
      runId: string,
      type: "tool.called" | "tool.succeeded" | "tool.failed",
      turn: number,
      data: object
    ) =>
      sql`INSERT INTO team_run_events (run_id, type, turn, data)
          VALUES (${runId}, ${type}, ${turn}, ${sql.json(data)})`.pipe(
        Effect.asVoid,
        Traced.withSpan("TeamsRepo.toolEvent")
      )

    /**
     * Moves an unfinished run to a final status and logs it as an event, in
     * one statement; final statuses never change again. The run as GET shows
     * it when it moved, nothing when it was already final.
     */
    const finish = (runId: string, to: "completed" | "failed" | "cancelled", fields: Outcome) =>
      sql`WITH updated AS (
            UPDATE team_runs SET
              status = ${to},
              result = COALESCE(${fields.result ?? null}, result),
              error = COALESCE(${fields.error ?? null}, error),
              stop_reason = ${fields.stopReason},
              turns = COALESCE(${fields.turns ?? null}, turns),
              tokens_used = COALESCE(${fields.tokensUsed ?? null}, tokens_used),
              completed_at = now()
            WHERE id = ${runId} AND status IN ('pending', 'running')
            RETURNING *
          ), event AS (
            INSERT INTO team_run_events (run_id, type, data)
            SELECT id, 'run.' || status, jsonb_strip_nulls(jsonb_build_object('status', status, 'result', result,
                   'error', error, 'stopReason', stop_reason, 'turns', turns, 'tokensUsed', tokens_used))
            FROM updated
          )
          SELECT tenant_id, ${sql.literal(runColumns)} FROM updated`.pipe(
        Effect.flatMap((rows) =>
          rows.length === 0
            ? Effect.succeed(Option.none<{ readonly tenantId: TenantId; readonly run: TeamRun }>())
            : Effect.map(decodeRuns(rows), ([run]) =>
                Option.some({ tenantId: TenantId.make(String(rows[0]!.tenantId)), run: run! })
              )
        ),
        Traced.withSpan("TeamsRepo.finish")
      )

    /**
     * Fails every unfinished run past its timeout plus `graceSeconds` (so a
     * live run records its own stop first), with its event; returns them as
     * GET shows them.
     */
    const failTimedOut = (graceSeconds: number) =>
      sql`WITH reaped AS (
            UPDATE team_runs SET status = 'failed', stop_reason = 'timeout',
              error = 'The run did not finish within its timeout of ' || timeout_ms || ' ms',
              completed_at = now()
            WHERE status IN ('pending', 'running')
              AND ${DurableRunRepo.pastDeadline(sql, graceSeconds, approvalTimeoutBounds.maximum)}
            RETURNING *
          ), event AS (
            INSERT INTO team_run_events (run_id, type, data)
            SELECT id, 'run.failed', jsonb_build_object('status', status, 'error', error, 'stopReason', stop_reason)
            FROM reaped
          )
          SELECT tenant_id, ${sql.literal(runColumns)} FROM reaped`.pipe(
        Effect.flatMap((rows) =>
          Effect.map(decodeRuns(rows), (runs) =>
            runs.map((run, i) => ({ tenantId: TenantId.make(String(rows[i]!.tenantId)), run }))
          )
        ),
        Effect.orDie,
        Traced.withSpan("TeamsRepo.failTimedOut")
      )

    /** Events after `afterId`, oldest first. */
    const events = DurableRunRepo.events<{ turn: number | null }>(sql, "team_run_events", "run_id", "turn")

    /** The team's runs not yet in a final state. */
    const unfinishedOf = (tenantId: TenantId, teamId: string) =>
      sql<{ id: string }>`SELECT id FROM team_runs
        WHERE tenant_id = ${tenantId} AND team_id = ${teamId} AND status IN ('pending', 'running')`.pipe(
        Effect.map((rows) => rows.map((row) => row.id)),
        Effect.orDie
      )

    return {
      ...teams,
      agentsAmong: (tenantId: TenantId, ids: ReadonlyArray<string>) => {
        const candidates = ids.filter(isId)
        return candidates.length === 0
          ? Effect.succeed(new Map<string, { id: string; name: string; status: string }>())
          : agentsAmong(tenantId, candidates)
      },
      insertRun,
      claimedBy: keyed.claimedBy,
      getRun: (tenantId: TenantId, teamId: string, runId: string) =>
        isId(runId) && isId(teamId)
          ? getRun({ tenantId, teamId, runId }).pipe(Effect.orDie, Traced.withSpan("TeamsRepo.getRun"))
          : Effect.succeed(Option.none<TeamRun>()),
      runs,
      transcript,
      // The workflow's statements keep their errors typed: it retries what is transient.
      begin: (id: string) => begin(id).pipe(Traced.withSpan("TeamsRepo.begin")),
      saveTurn,
      turnEvent,
      toolEvent,
      finish,
      failTimedOut,
      events,
      deadline: (tenantId: TenantId, teamId: string, runId: string) =>
        isId(runId) && isId(teamId)
          ? durableRuns.deadline(tenantId, [sql`team_id = ${teamId}`, sql`id = ${runId}`])
          : Effect.succeed(Option.none<number>()),
      unfinished: durableRuns.unfinished,
      unfinishedOf,
      notStarted: durableRuns.notStarted,
      unpruned: durableRuns.unpruned,
      markPruned: durableRuns.markPruned,
      /** Runs `effect` in one transaction (a final status with its webhook event). */
      withTransaction: sql.withTransaction
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
