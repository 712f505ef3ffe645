import { PgClient } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { TenantId } from "../Domain/Ids.ts"
import * as Traced from "../Observability/Traced.ts"
import type { Approval, ApprovalKind, ApprovalRunKind, ApprovalStatus } from "./Api.ts"

// The approvals' SQL (migrations 0033, 0035). A decision, an expiry and a
// cancellation are each one statement conditional on `pending`: whichever
// comes first is the only one written.

interface Row {
  readonly id: string
  readonly kind: ApprovalKind
  readonly tenantId: string
  readonly runKind: ApprovalRunKind
  readonly runId: string
  readonly scope: string
  readonly callId: string
  readonly ownerKind: "orchestration" | "team"
  readonly ownerId: string
  readonly toolId: string | null
  readonly tool: string
  readonly arguments: unknown
  readonly reason: string | null
  readonly status: ApprovalStatus
  readonly requestedAt: Date
  readonly expiresAt: Date
  readonly onExpiry: "reject" | "approve"
  readonly decidedBy: string | null
  readonly decidedAt: Date | null
  readonly note: string | null
  readonly editedArguments: unknown
  readonly wakeToken: string
}

/** An approval with what the service needs besides its JSON: its tenant and the webhook's owner. */
export interface StoredApproval {
  readonly approval: Approval
  readonly wakeToken: string
  readonly tenantId: TenantId
  readonly owner: { readonly kind: "orchestration" | "team"; readonly id: string }
}

const toStored = (row: Row): StoredApproval => ({
  wakeToken: row.wakeToken,
  tenantId: row.tenantId as TenantId,
  owner: { kind: row.ownerKind, id: row.ownerId },
  approval: {
    id: row.id,
    kind: row.kind,
    runKind: row.runKind,
    runId: row.runId,
    step: row.runKind === "execution" && row.kind === "tool_call" ? row.scope : null,
    turn: row.runKind === "team_run" && row.kind === "tool_call" ? row.scope : null,
    callId: row.callId,
    tool: row.tool,
    toolId: row.toolId,
    arguments: row.arguments,
    reason: row.reason,
    status: row.status,
    requestedAt: new Date(row.requestedAt),
    expiresAt: new Date(row.expiresAt),
    onExpiry: row.onExpiry,
    decidedBy: row.decidedBy,
    decidedAt: row.decidedAt === null ? null : new Date(row.decidedAt),
    note: row.note,
    editedArguments: (row.editedArguments ?? null) as Approval["editedArguments"]
  }
})

const columns = `id, kind, tenant_id, run_kind, run_id, scope, call_id, owner_kind, owner_id, tool_id, tool, arguments, reason,
  status, requested_at, expires_at, on_expiry, decided_by, decided_at, note, edited_arguments, wake_token`

/** A call that needs a decision, as the run asks for it. */
export interface ApprovalRequest {
  /** The id it gets if this request writes it. */
  readonly id: string
  /** A tool call's (the default), or a team run's result's. */
  readonly kind?: ApprovalKind | undefined
  /** The token of the deferred its run awaits (Wake.ts), for that id. */
  readonly wakeToken: string
  readonly tenantId: TenantId
  readonly runKind: ApprovalRunKind
  readonly runId: string
  readonly scope: string
  readonly callId: string
  readonly owner: { readonly kind: "orchestration" | "team"; readonly id: string }
  readonly toolId: string | null
  readonly tool: string
  readonly arguments: unknown
  readonly reason: string | null
  readonly timeoutMs: number
  readonly onExpiry: "reject" | "approve"
}

/** A decision as written: by a person, by the expiry, or by the run ending. */
export interface DecisionWrite {
  readonly status: "approved" | "rejected" | "expired" | "cancelled"
  readonly decidedBy: string
  readonly note: string | null
  readonly editedArguments: unknown
}

export class ApprovalsRepo extends Context.Service<ApprovalsRepo>()("agent-host/ApprovalsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* PgClient.PgClient
    const cols = sql.literal(columns)

    /**
     * The call's approval: written the first time it is asked for (`created`),
     * the one already written on any later attempt of the same step.
     */
    const request = (input: ApprovalRequest) =>
      sql<Row & { readonly created: boolean }>`WITH inserted AS (
          INSERT INTO approvals (id, kind, tenant_id, run_kind, run_id, scope, call_id, owner_kind, owner_id, tool_id, tool,
                                 arguments, reason, expires_at, on_expiry, wake_token)
          VALUES (${input.id}, ${input.kind ?? "tool_call"}, ${input.tenantId}, ${input.runKind}, ${input.runId}, ${input.scope}, ${input.callId},
                  ${input.owner.kind}, ${input.owner.id}, ${input.toolId}, ${input.tool}, ${sql.json(input.arguments)},
                  ${input.reason}, now() + make_interval(secs => ${input.timeoutMs / 1000}), ${input.onExpiry},
                  ${input.wakeToken})
          ON CONFLICT (run_id, scope, call_id) DO NOTHING
          RETURNING ${cols}
        )
        SELECT ${cols}, true AS created FROM inserted
        UNION ALL
        SELECT ${cols}, false AS created FROM approvals
        WHERE run_id = ${input.runId} AND scope = ${input.scope} AND call_id = ${input.callId}
          AND NOT EXISTS (SELECT 1 FROM inserted)`.pipe(
        Effect.map((rows) => ({ ...toStored(rows[0]!), created: rows[0]!.created })),
        Traced.withSpan("ApprovalsRepo.request")
      )

    const findById = (tenantId: TenantId, id: string) =>
      sql<Row>`SELECT ${cols} FROM approvals WHERE id = ${id} AND tenant_id = ${tenantId}`.pipe(
        Effect.map((rows) => (rows.length === 0 ? undefined : toStored(rows[0]!))),
        Traced.withSpan("ApprovalsRepo.findById")
      )

    /** The approval of one call of a run, whatever its tenant (the run's own read). */
    const forCall = (runId: string, scope: string, callId: string) =>
      sql<Row>`SELECT ${cols} FROM approvals WHERE run_id = ${runId} AND scope = ${scope} AND call_id = ${callId}`.pipe(
        Effect.map((rows) => (rows.length === 0 ? undefined : toStored(rows[0]!))),
        Traced.withSpan("ApprovalsRepo.forCall")
      )

    const byId = (id: string) =>
      sql<Row>`SELECT ${cols} FROM approvals WHERE id = ${id}`.pipe(
        Effect.map((rows) => (rows.length === 0 ? undefined : toStored(rows[0]!))),
        Traced.withSpan("ApprovalsRepo.byId")
      )

    const list = (
      tenantId: TenantId,
      query: {
        readonly status?: ApprovalStatus | undefined
        readonly runId?: string | undefined
        readonly after: string | null
        readonly limit: number
      }
    ) =>
      Effect.gen(function* () {
        const where = [
          sql`tenant_id = ${tenantId}`,
          ...(query.status === undefined ? [] : [sql`status = ${query.status}`]),
          ...(query.runId === undefined ? [] : [sql`run_id = ${query.runId}`])
        ]
        const rows = yield* sql<Row>`SELECT ${cols} FROM approvals
          WHERE ${sql.and([...where, ...(query.after === null ? [] : [sql`id < ${query.after}`])])}
          ORDER BY id DESC LIMIT ${query.limit + 1}`
        const [{ total }] = yield* sql<{ readonly total: number }>`SELECT count(*)::int AS total FROM approvals
          WHERE ${sql.and(where)}`
        return { rows: rows.slice(0, query.limit).map(toStored), more: rows.length > query.limit, total }
      }).pipe(Traced.withSpan("ApprovalsRepo.list"))

    /** Writes the decision if the approval is still pending; the row as it then is, and whether this wrote it. */
    const decide = (id: string, write: DecisionWrite) =>
      sql<Row & { readonly decided: boolean }>`WITH updated AS (
          UPDATE approvals SET status = ${write.status}, decided_by = ${write.decidedBy}, decided_at = now(),
                 note = ${write.note},
                 edited_arguments = ${write.editedArguments === null ? null : sql.json(write.editedArguments)}
          WHERE id = ${id} AND status = 'pending'
          RETURNING ${cols}
        )
        SELECT ${cols}, true AS decided FROM updated
        UNION ALL
        SELECT ${cols}, false AS decided FROM approvals WHERE id = ${id} AND NOT EXISTS (SELECT 1 FROM updated)`.pipe(
        Effect.map((rows) => (rows.length === 0 ? undefined : { ...toStored(rows[0]!), decided: rows[0]!.decided })),
        Traced.withSpan("ApprovalsRepo.decide")
      )

    /** The run's pending approvals, cancelled (the run ended first); their ids and wake tokens. */
    const cancelRun = (runId: string) =>
      sql<{ readonly id: string; readonly wakeToken: string }>`UPDATE approvals
        SET status = 'cancelled', decided_by = 'run', decided_at = now()
        WHERE run_id = ${runId} AND status = 'pending' RETURNING id, wake_token`.pipe(
        Traced.withSpan("ApprovalsRepo.cancelRun")
      )

    /** The runs waiting on these decided approvals were woken (their deferreds completed), or need no waking. */
    const markWoken = (ids: ReadonlyArray<string>) =>
      ids.length === 0
        ? Effect.void
        : sql`UPDATE approvals SET woken_at = now() WHERE id IN ${sql.in(ids)} AND woken_at IS NULL`.pipe(
            Effect.asVoid,
            Traced.withSpan("ApprovalsRepo.markWoken")
          )

    /**
     * Approvals decided (approved or rejected) over `seconds` ago whose run
     * was not seen woken, oldest first, with whether their run still runs
     * (only those have a workflow to wake).
     */
    const unwoken = (seconds: number, limit: number) =>
      sql<{ readonly id: string; readonly wakeToken: string; readonly running: boolean }>`
        SELECT a.id, a.wake_token, COALESCE(
            CASE a.run_kind
              WHEN 'execution' THEN (SELECT e.status = 'running' FROM executions e WHERE e.id = a.run_id)
              ELSE (SELECT t.status = 'running' FROM team_runs t WHERE t.id = a.run_id)
            END, false) AS running
        FROM approvals a
        WHERE a.woken_at IS NULL AND a.status IN ('approved', 'rejected')
          AND a.decided_at < now() - make_interval(secs => ${seconds})
        ORDER BY a.decided_at LIMIT ${limit}`.pipe(Traced.withSpan("ApprovalsRepo.unwoken"))

    /**
     * What the run's own event stream says of its approval (`approval.*`),
     * and whether the run waits (shown `waiting`): while any of its approvals
     * is pending. Written in the transaction of the change it reports, so
     * each is logged once; nothing is logged to a run that has ended.
     */
    /**
     * Whether the run waits for people (any approval of it pending), and for
     * how long it did: a wait's time goes to `held_ms` when it ends, which its
     * deadline does not count (migration 0036).
     */
    const markWaiting = (table: "executions" | "team_runs", runId: string) =>
      sql`UPDATE ${sql(table)} SET
            waiting = w.pending,
            held_ms = held_ms + CASE WHEN NOT w.pending AND waiting_since IS NOT NULL
              THEN (EXTRACT(EPOCH FROM (clock_timestamp() - waiting_since)) * 1000)::bigint ELSE 0 END,
            waiting_since = CASE WHEN w.pending THEN COALESCE(waiting_since, clock_timestamp()) END
          FROM (SELECT EXISTS (SELECT 1 FROM approvals WHERE run_id = ${runId} AND status = 'pending') AS pending) w
          WHERE id = ${runId} AND status = 'running'`

    const noteOnRun = (stored: StoredApproval, type: string) => {
      const { approval } = stored
      const data = {
        ...(approval.kind === "result" ? { kind: approval.kind } : {}),
        approvalId: approval.id,
        callId: approval.callId,
        tool: approval.tool,
        status: approval.status,
        ...(approval.decidedBy === null ? {} : { decidedBy: approval.decidedBy }),
        ...(approval.note === null ? {} : { note: approval.note })
      }
      if (approval.runKind === "team_run") {
        // A result's approval belongs to no turn.
        const turn = approval.turn === null ? Number.NaN : Number(approval.turn.replace(/^turn-/, ""))
        return Effect.all([
          markWaiting("team_runs", approval.runId),
          sql`INSERT INTO team_run_events (run_id, type, turn, data)
              SELECT ${approval.runId}, ${type}, ${Number.isSafeInteger(turn) ? turn : null}, ${sql.json(Number.isSafeInteger(turn) ? { index: turn, ...data } : data)}
              WHERE EXISTS (SELECT 1 FROM team_runs WHERE id = ${approval.runId} AND completed_at IS NULL)`
        ]).pipe(Effect.asVoid, Traced.withSpan("ApprovalsRepo.noteOnRun"))
      }
      return Effect.all([
        markWaiting("executions", approval.runId),
        sql`INSERT INTO execution_events (execution_id, type, step_id, data)
            SELECT ${approval.runId}, ${type}, ${approval.step}, ${sql.json(data)}
            WHERE EXISTS (SELECT 1 FROM executions WHERE id = ${approval.runId} AND completed_at IS NULL)`
      ]).pipe(Effect.asVoid, Traced.withSpan("ApprovalsRepo.noteOnRun"))
    }

    return { request, findById, forCall, byId, list, decide, cancelRun, noteOnRun, markWoken, unwoken } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
