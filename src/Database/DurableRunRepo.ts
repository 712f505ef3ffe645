import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as SqlSchema from "effect/sql/SqlSchema"
import type * as Statement from "effect/sql/Statement"
import { TenantId } from "../Domain/Ids.ts"
import * as Traced from "../Observability/Traced.ts"
import { claimKeyed, keyedBy } from "./Idempotency.ts"

// Executions, team runs and ingested documents are durable runs: a row of
// the feature's table that a workflow of effect's cluster moves
// (Runtime/DurableRuns.ts). These are the statements their tables have in
// common. Table, column and condition names are the caller's constants (SQL
// text), never input; values stay parameters.

/** A run's duration (so far, while it runs) and its times, as GET shows them. */
export const timeColumns = `(EXTRACT(EPOCH FROM (COALESCE(completed_at, now()) - created_at)) * 1000)::int AS duration_ms,
  created_at, completed_at`

/** What a start with an Idempotency-Key claims or finds (`claimKeyed`), but for the run's owner. */
export const claimedFields = <S extends Schema.Top>(status: S) => ({
  id: Schema.String,
  status,
  requestHash: Schema.NullOr(Schema.String),
  fresh: Schema.Boolean
})

/** What `begin` reads of every run, beside what the run was given when it was accepted. */
export const begunFields = <S extends Schema.Top>(status: S) => ({
  tenantId: TenantId,
  status,
  timeoutMs: Schema.Int,
  /** The time it spent waiting for people, which its timeout does not count (migration 0036). */
  heldMs: Schema.Number,
  createdAt: Schema.Date
})

/**
 * SQL: a run past its timeout and `graceSeconds`, the time it waited for
 * people not counted. One waiting now is left to its approvals' clocks,
 * unless it has waited longer than any approval may (`maxWaitMs`): then its
 * workflow is lost, and the timeout applies as if the wait had ended.
 */
export const pastDeadline = (sql: SqlClient.SqlClient, graceSeconds: number, maxWaitMs: number) =>
  sql`created_at < now() - make_interval(secs => (timeout_ms + held_ms) / 1000.0 + ${graceSeconds})
      AND (NOT waiting OR waiting_since < now() - make_interval(secs => ${maxWaitMs / 1000 + graceSeconds}))`

/** Which of a table's runs the sweeps read (SQL text). */
export interface Conditions {
  /** A run not finished yet. */
  readonly unfinished: string
  /** A run whose workflow has not begun it yet. */
  readonly notStarted: string
  /** A finished run, and the column of when it finished. */
  readonly finished: string
  readonly finishedAt: string
}

/** A run that is pending, then running, then has a final status and `completed_at`. */
export const statusConditions: Conditions = {
  unfinished: "status IN ('pending', 'running')",
  notStarted: "status = 'pending'",
  finished: "status IN ('completed', 'failed', 'cancelled')",
  finishedAt: "completed_at"
}

export interface RunTable {
  readonly table: string
  /** Names the spans: `ExecutionsRepo` gives `ExecutionsRepo.markPruned`. */
  readonly spanPrefix: string
  /** `statusConditions` when not given. */
  readonly conditions?: Conditions
}

/** The sweeps' statements over a kind of run's table (DurableRuns.Sweeps), and its `begin` and `deadline`. */
export const make = (sql: SqlClient.SqlClient, options: RunTable) => {
  const table = sql(options.table)
  const run = { ...statusConditions, ...options.conditions, spanPrefix: options.spanPrefix }
  const ids = (rows: ReadonlyArray<{ readonly id: string }>) => rows.map((row) => row.id)
  return {
    unfinished: sql<{ id: string }>`SELECT id FROM ${table} WHERE ${sql.literal(run.unfinished)}`.pipe(
      Effect.map(ids),
      Effect.orDie
    ),
    /** Runs accepted more than `seconds` ago that have not started yet; oldest first. */
    notStarted: (seconds: number, limit: number) =>
      sql<{ id: string }>`SELECT id FROM ${table}
        WHERE ${sql.literal(run.notStarted)} AND created_at < now() - make_interval(secs => ${seconds})
        ORDER BY created_at LIMIT ${limit}`.pipe(Effect.map(ids), Effect.orDie),
    /** Runs finished over `seconds` ago whose workflow messages are still stored; oldest first. */
    unpruned: (seconds: number, limit: number) =>
      sql<{ id: string }>`SELECT id FROM ${table}
        WHERE NOT messages_pruned AND ${sql.literal(run.finished)}
          AND ${sql(run.finishedAt)} < now() - make_interval(secs => ${seconds})
        ORDER BY ${sql(run.finishedAt)} LIMIT ${limit}`.pipe(Effect.map(ids), Effect.orDie),
    /**
     * Marks these finished runs as pruned, in the transaction that deletes
     * their workflows' stored messages (ClusterTables.pruneMessages).
     */
    markPruned: (runIds: ReadonlyArray<string>) =>
      sql`UPDATE ${table} SET messages_pruned = true WHERE id IN ${sql.in(runIds)}`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan(`${run.spanPrefix}.markPruned`)
      ),
    /**
     * Moves a pending run to running, with `event` (a statement over the
     * `started` CTE, whose rows have `returning`), and reads it (`columns`
     * and `begunFields`'), fixed when it was accepted, in one statement. A
     * run already running is left as it is; a finished one comes back as it is.
     */
    begin: <S extends Schema.Codec<any, any, never, never>>(options: {
      readonly result: S
      readonly returning: string
      readonly event: Statement.Fragment
      readonly columns: string
    }) =>
      SqlSchema.findOne({
        Request: Schema.String,
        Result: options.result,
        execute: (id) =>
          sql`WITH started AS (
                UPDATE ${table} SET status = 'running', started_at = COALESCE(started_at, now())
                WHERE id = ${id} AND status = 'pending'
                RETURNING ${sql.literal(options.returning)}
              ), event AS (${options.event})
              SELECT tenant_id, ${sql.literal(options.columns)}, timeout_ms, held_ms::float8 AS held_ms, created_at,
                     CASE WHEN EXISTS (SELECT 1 FROM started) THEN 'running' ELSE status END AS status
              FROM ${table} WHERE id = ${id}`
      }),
    /**
     * When a run's own timeout runs out, for bounding its event streams
     * (none while it waits for a person); `filters` name the run.
     */
    deadline: (tenantId: TenantId, filters: ReadonlyArray<Statement.Fragment>) =>
      sql<{ createdAt: Date; timeoutMs: number; heldMs: number; waiting: boolean }>`
        SELECT created_at, timeout_ms, held_ms::float8 AS held_ms, waiting
        FROM ${table} WHERE ${sql.and([sql`tenant_id = ${tenantId}`, ...filters])}`.pipe(
        Effect.map((rows) =>
          Option.map(Option.fromNullishOr(rows[0]), (row) =>
            row.waiting ? Number.POSITIVE_INFINITY : new Date(row.createdAt).getTime() + row.timeoutMs + row.heldMs
          )
        ),
        Effect.orDie
      )
  }
}

/**
 * A run's events after `afterId`, oldest first, a page at a time: `table`
 * holds them by `runColumn` (the run's id), with the kind's own `columns`.
 */
export const events =
  <Own extends object>(sql: SqlClient.SqlClient, table: string, runColumn: string, columns: string) =>
  (runId: string, afterId: string) =>
    sql<{ id: string; type: string; data: unknown; createdAt: Date } & Own>`
      SELECT id::text AS id, type, ${sql.literal(columns)}, data, created_at FROM ${sql(table)}
      WHERE ${sql(runColumn)} = ${runId} AND ${sql(table)}.id > ${afterId}::bigint
      ORDER BY ${sql(table)}.id LIMIT 500`.pipe(Effect.orDie)

/**
 * A kind of run started with an Idempotency-Key (Idempotency.ts): `claimed`
 * decodes its `returning` columns.
 */
export const keyed = <S extends Schema.Codec<any, any, never, never>>(
  sql: SqlClient.SqlClient,
  options: { readonly table: string; readonly spanPrefix: string; readonly returning: string; readonly claimed: S }
) => ({
  /** `insert` answering as a fresh claim, for a run stored without a key. */
  fresh: (insert: Statement.Fragment) => sql`${insert} RETURNING ${sql.literal(options.returning)}, true AS fresh`,
  /** Stores a run with `insert`, or finds the one its key already names. */
  claim: (tenantId: TenantId, idempotencyKey: string | null, insert: Statement.Fragment) =>
    claimKeyed({ ...options, tenantId, idempotencyKey, insert }).pipe(Effect.provideService(SqlClient.SqlClient, sql)),
  /** The run a (still valid) key names, if any. */
  claimedBy: (tenantId: TenantId, idempotencyKey: string) =>
    keyedBy({ ...options, tenantId, idempotencyKey }).pipe(
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.orDie,
      Traced.withSpan(`${options.spanPrefix}.claimedBy`)
    )
})
