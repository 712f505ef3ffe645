import { PgClient } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { TenantId } from "../Domain/Ids.ts"
import type { ModelReply } from "../Models/Models.ts"
import * as Traced from "../Observability/Traced.ts"
import type { CallStatus, ToolCallRecord } from "./ToolCall.ts"

export type { CallStatus, ToolCallRecord } from "./ToolCall.ts"

export type RunKind = "execution" | "team_run" | "chat"

/** Where a loop runs: a chat turn, an execution's step, a team member's turn. */
export interface LoopKey {
  readonly tenantId: TenantId
  readonly runKind: RunKind
  /** The chat turn's, execution's or team run's id. */
  readonly runId: string
  /** The step id, the team turn, or `chat`. */
  readonly scope: string
}

interface CallRow {
  readonly callId: string
  readonly toolName: string
  readonly toolId: string | null
  readonly arguments: unknown
  readonly status: CallStatus
  readonly result: string | null
  readonly cut: boolean
  readonly error: string | null
  readonly errorKind: string | null
  readonly attempts: number
  readonly durationMs: number | null
  readonly startedAt: Date
  readonly scope: string
  readonly turn: number
}

const toRecord = (row: CallRow): ToolCallRecord => ({
  callId: row.callId,
  tool: row.toolName,
  toolId: row.toolId,
  arguments: row.arguments,
  status: row.status,
  result: row.result,
  resultCut: row.cut,
  error: row.error,
  errorKind: row.errorKind,
  attempts: row.attempts,
  durationMs: row.durationMs,
  startedAt: row.startedAt,
  scope: row.scope,
  turn: row.turn
})

const callColumns = `call_id, tool_name, tool_id, arguments, status, result, full_result IS NOT NULL AS cut, error,
  error_kind, attempts, duration_ms, started_at, scope, turn`

/** A call as asked for, where it stands in its loop. */
export interface CallStart {
  readonly callId: string
  readonly turn: number
  readonly seq: number
  readonly toolId: string | null
  readonly toolName: string
  readonly arguments: unknown
}

/** How a call ended, as stored. */
export interface CallEnd {
  readonly status: "succeeded" | "failed" | "cancelled"
  /** What the model saw. */
  readonly result: string | null
  /** The whole result, when `result` is a cut of it. */
  readonly fullResult: string | null
  readonly error: string | null
  readonly errorKind: string | null
  readonly durationMs: number
}

/** What a durable loop kept before it was run again (`loadState`). */
export interface LoopState {
  readonly turns: ReadonlyMap<number, ModelReply>
  readonly calls: ReadonlyMap<string, ToolCallRecord>
  /** Calls of each tool (by name) in the run's other steps or turns. */
  readonly elsewhere: ReadonlyMap<string, number>
}

/** The tool loop's records (migration 0028): the model's replies in a loop, and each call. */
export class ToolCallsRepo extends Context.Service<ToolCallsRepo>()("agent-host/ToolCallsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* PgClient.PgClient

    /**
     * Keeps the model's reply of `turn`; when another attempt kept one first,
     * that one is returned (`first` false), so both go on from the same calls.
     */
    const saveTurn = (key: LoopKey, turn: number, reply: ModelReply) =>
      sql<{ reply: ModelReply; first: boolean }>`WITH kept AS (
          INSERT INTO tool_loop_turns (run_id, scope, turn, tenant_id, reply)
          VALUES (${key.runId}, ${key.scope}, ${turn}, ${key.tenantId}, ${sql.json(reply)})
          ON CONFLICT DO NOTHING RETURNING reply
        )
        SELECT reply, true AS first FROM kept
        UNION ALL
        SELECT reply, false AS first FROM tool_loop_turns
        WHERE run_id = ${key.runId} AND scope = ${key.scope} AND turn = ${turn} AND NOT EXISTS (SELECT 1 FROM kept)`.pipe(
        Effect.map((rows) => ({ reply: rows[0]?.reply ?? reply, first: rows[0]?.first ?? true })),
        Traced.withSpan("ToolCallsRepo.saveTurn")
      )

    /**
     * Everything a durable loop kept before, in one statement: its replies
     * by turn, its calls, and how many calls of each tool the run's other
     * steps or turns made (refusals apart), for `maxCallsPerRun`.
     */
    const loadState = (key: LoopKey) =>
      sql<{
        readonly turns: ReadonlyArray<{ readonly turn: number; readonly reply: ModelReply }>
        readonly calls: ReadonlyArray<Omit<CallRow, "startedAt"> & { readonly startedAt: string }>
        readonly elsewhere: Readonly<Record<string, number>>
      }>`SELECT
          (SELECT coalesce(json_agg(json_build_object('turn', turn, 'reply', reply)), '[]') FROM tool_loop_turns
            WHERE run_id = ${key.runId} AND scope = ${key.scope}) AS turns,
          (SELECT coalesce(json_agg(json_build_object('callId', call_id, 'toolName', tool_name, 'toolId', tool_id,
              'arguments', arguments, 'status', status, 'result', result, 'cut', full_result IS NOT NULL,
              'error', error, 'errorKind', error_kind, 'attempts', attempts, 'durationMs', duration_ms,
              'startedAt', started_at, 'scope', scope, 'turn', turn)), '[]') FROM tool_calls
            WHERE run_id = ${key.runId} AND scope = ${key.scope}) AS calls,
          (SELECT coalesce(json_object_agg(tool_name, n), '{}') FROM (
            SELECT tool_name, count(*)::int AS n FROM tool_calls
            WHERE run_id = ${key.runId} AND scope <> ${key.scope}
              AND status <> 'cancelled' AND coalesce(error_kind, '') NOT IN ('limit', 'unknown_tool')
            GROUP BY tool_name) counted) AS elsewhere`.pipe(
        Effect.map(
          ([row]): LoopState => ({
            turns: new Map((row?.turns ?? []).map(({ reply, turn }) => [turn, reply])),
            calls: new Map(
              (row?.calls ?? []).map((call) => [
                call.callId,
                toRecord({ ...call, startedAt: new Date(call.startedAt) })
              ])
            ),
            elsewhere: new Map(Object.entries(row?.elsewhere ?? {}))
          })
        ),
        Traced.withSpan("ToolCallsRepo.loadState")
      )

    /**
     * Records a call that ended without being in flight first: a refused
     * one, or a chat turn's (not replayed, so nothing needs to know it is
     * running). A record there already is replaced.
     */
    const recordCall = (key: LoopKey, call: CallStart & { readonly startedAt: Date }, end: CallEnd) =>
      sql`INSERT INTO tool_calls
          (run_id, scope, call_id, tenant_id, run_kind, turn, seq, tool_id, tool_name, arguments, status,
           result, full_result, error, error_kind, duration_ms, started_at, finished_at)
        VALUES (${key.runId}, ${key.scope}, ${call.callId}, ${key.tenantId}, ${key.runKind}, ${call.turn},
          ${call.seq}, ${call.toolId}, ${call.toolName}, ${sql.json(call.arguments === undefined ? null : call.arguments)},
          ${end.status}, ${end.result}, ${end.fullResult}, ${end.error}, ${end.errorKind},
          ${Math.round(end.durationMs)}, ${call.startedAt}, now())
        ON CONFLICT (run_id, scope, call_id) DO UPDATE SET status = excluded.status, result = excluded.result,
          full_result = excluded.full_result, error = excluded.error, error_kind = excluded.error_kind,
          duration_ms = excluded.duration_ms, finished_at = excluded.finished_at`.pipe(
        Effect.asVoid,
        Traced.withSpan("ToolCallsRepo.recordCall")
      )

    /** A call of this loop as stored, with its whole result. */
    const storedCall = (key: LoopKey, callId: string) =>
      sql<CallRow & { readonly fullResult: string | null }>`SELECT ${sql.literal(callColumns)}, full_result
        FROM tool_calls WHERE run_id = ${key.runId} AND scope = ${key.scope} AND call_id = ${callId}`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0])),
        Traced.withSpan("ToolCallsRepo.storedCall")
      )

    /**
     * Records a call as running; one found running (its node died during
     * it) is counted as attempted once more. Returns the attempt.
     */
    const startCall = (key: LoopKey, call: CallStart) =>
      sql<{ attempts: number }>`INSERT INTO tool_calls
          (run_id, scope, call_id, tenant_id, run_kind, turn, seq, tool_id, tool_name, arguments, status)
        VALUES (${key.runId}, ${key.scope}, ${call.callId}, ${key.tenantId}, ${key.runKind}, ${call.turn},
          ${call.seq}, ${call.toolId}, ${call.toolName}, ${sql.json(call.arguments === undefined ? null : call.arguments)},
          'running')
        ON CONFLICT (run_id, scope, call_id) DO UPDATE SET attempts = tool_calls.attempts + 1, started_at = now()
        RETURNING attempts`.pipe(
        Effect.map((rows) => rows[0]?.attempts ?? 1),
        Traced.withSpan("ToolCallsRepo.startCall")
      )

    const finishCall = (key: LoopKey, callId: string, end: CallEnd) =>
      sql`UPDATE tool_calls SET status = ${end.status}, result = ${end.result}, full_result = ${end.fullResult},
          error = ${end.error}, error_kind = ${end.errorKind}, duration_ms = ${Math.round(end.durationMs)},
          finished_at = now()
        WHERE run_id = ${key.runId} AND scope = ${key.scope} AND call_id = ${callId}`.pipe(
        Effect.asVoid,
        Traced.withSpan("ToolCallsRepo.finishCall")
      )

    /** The calls of a run, in the order they were asked for. */
    const callsOf = (tenantId: TenantId, runId: string) =>
      sql<CallRow>`SELECT ${sql.literal(callColumns)} FROM tool_calls
        WHERE tenant_id = ${tenantId} AND run_id = ${runId} ORDER BY seq, scope, call_id`.pipe(
        Effect.map((rows) => rows.map(toRecord)),
        Traced.withSpan("ToolCallsRepo.callsOf")
      )

    /** One call's whole result (the cut one's whole text), if the call is the tenant's. */
    const fullResult = (tenantId: TenantId, runId: string, callId: string) =>
      sql<{ result: string | null }>`SELECT coalesce(full_result, result) AS result FROM tool_calls
        WHERE tenant_id = ${tenantId} AND run_id = ${runId} AND call_id = ${callId}
        ORDER BY scope LIMIT 1`.pipe(
        Effect.map((rows) => (rows.length === 0 ? Option.none() : Option.some(rows[0]!.result))),
        Traced.withSpan("ToolCallsRepo.fullResult")
      )

    /** The kept replies of these runs' loops, once the runs can never run again (pruned). */
    const forgetTurns = (runIds: ReadonlyArray<string>) =>
      runIds.length === 0
        ? Effect.void
        : sql`DELETE FROM tool_loop_turns WHERE run_id IN ${sql.in(runIds)}`.pipe(
            Effect.asVoid,
            Traced.withSpan("ToolCallsRepo.forgetTurns")
          )

    /**
     * Copies a finished run's calls of these steps, with those of the agents
     * they asked (`step/...` scopes), under another run: the steps a retry
     * carries over, whose calls it shows as its own. Copying again changes nothing.
     */
    const copyCalls = (tenantId: TenantId, fromRunId: string, toRunId: string, scopes: ReadonlyArray<string>) =>
      scopes.length === 0
        ? Effect.void
        : sql`INSERT INTO tool_calls
            (run_id, scope, call_id, tenant_id, run_kind, turn, seq, tool_id, tool_name, arguments, status,
             result, full_result, error, error_kind, attempts, duration_ms, started_at, finished_at)
          SELECT ${toRunId}, scope, call_id, tenant_id, run_kind, turn, seq, tool_id, tool_name, arguments, status,
            result, full_result, error, error_kind, attempts, duration_ms, started_at, finished_at
          FROM tool_calls
          WHERE tenant_id = ${tenantId} AND run_id = ${fromRunId} AND split_part(scope, '/', 1) IN ${sql.in(scopes)}
          ON CONFLICT (run_id, scope, call_id) DO NOTHING`.pipe(
            Effect.asVoid,
            Traced.withSpan("ToolCallsRepo.copyCalls")
          )

    /** Calls still running in a run that was cancelled: they were stopped. */
    const cancelRunning = (runId: string) =>
      sql`UPDATE tool_calls SET status = 'cancelled', error = 'Cancelled', finished_at = now()
        WHERE run_id = ${runId} AND status = 'running'`.pipe(
        Effect.asVoid,
        Traced.withSpan("ToolCallsRepo.cancelRunning")
      )

    /**
     * One call of a run's step or turn, or of a chat turn, as stored with its
     * whole result: only the tenant's, and only of that kind of run.
     */
    const tenantCall = (tenantId: TenantId, runKind: RunKind, runId: string, scope: string, callId: string) =>
      sql<CallRow & { readonly fullResult: string | null }>`SELECT ${sql.literal(callColumns)}, full_result
        FROM tool_calls WHERE tenant_id = ${tenantId} AND run_kind = ${runKind} AND run_id = ${runId}
          AND scope = ${scope} AND call_id = ${callId}`.pipe(
        Effect.map((rows) =>
          Option.map(Option.fromNullishOr(rows[0]), (row) => ({ record: toRecord(row), fullResult: row.fullResult }))
        ),
        Traced.withSpan("ToolCallsRepo.tenantCall")
      )

    /**
     * Deletes a conversation's chat calls (`scope` is the conversation's):
     * those of its turns, and those the agents its turns asked made under
     * the same turn ids (their scopes start with the turn's). How many went.
     */
    const forgetChat = (tenantId: TenantId, scope: string) =>
      sql<{ count: number }>`WITH gone AS (
          DELETE FROM tool_calls WHERE tenant_id = ${tenantId} AND run_kind = 'chat' AND run_id IN (
            SELECT run_id FROM tool_calls WHERE tenant_id = ${tenantId} AND run_kind = 'chat' AND scope = ${scope})
          RETURNING 1)
        SELECT count(*)::int AS count FROM gone`.pipe(
        Effect.map((rows) => rows[0]?.count ?? 0),
        Traced.withSpan("ToolCallsRepo.forgetChat")
      )

    return {
      loadState,
      recordCall,
      saveTurn,
      storedCall: (key: LoopKey, callId: string) =>
        Effect.map(
          storedCall(key, callId),
          Option.map((row) => ({ record: toRecord(row), fullResult: row.fullResult }))
        ),
      startCall,
      finishCall,
      callsOf,
      fullResult,
      cancelRunning,
      copyCalls,
      forgetTurns,
      tenantCall,
      forgetChat
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
