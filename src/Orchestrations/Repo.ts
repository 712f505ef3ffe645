import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { SqlSchema } from "effect/sql"
import { pageOf } from "../Domain/Cursor.ts"
import { type AgentId, isId, newId, type OrchestrationId, TenantId } from "../Domain/Ids.ts"
import { Execution, ExecutionStatus, Orchestration, type OrchestrationStatus, Step } from "./Api.ts"

const columns = "id, name, description, status, steps, timeout_ms, created_at, updated_at"

/** All SQL of orchestrations; every statement is scoped by tenant. */
export class OrchestrationsRepo extends Context.Service<OrchestrationsRepo>()("agent-host/OrchestrationsRepo", {
  make: Effect.gen(function*() {
    // The Postgres client itself, for `sql.json` (jsonb parameters).
    const sql = yield* PgClient.PgClient
    const cols = sql.literal(columns)

    // JSON is stored as given (the client renames columns only), so steps
    // keep `agentId` and `dependsOn`; Orchestration decodes the steps read back.

    // The page and the total in one statement; only an empty page needs the count on its own.
    const OrchestrationWithTotal = Schema.Struct({ ...Orchestration.fields, total: Schema.Int })
    const page = SqlSchema.findAll({
      Request: Schema.Struct({
        tenantId: Schema.String,
        activeOnly: Schema.Boolean,
        after: Schema.NullOr(Schema.String),
        limit: Schema.Int
      }),
      Result: OrchestrationWithTotal,
      execute: (request) => {
        const scope = sql.and([
          sql`tenant_id = ${request.tenantId}`,
          ...(request.activeOnly ? [sql`status = 'active'`] : [])
        ])
        return sql`SELECT ${cols}, (SELECT count(*)::int FROM orchestrations WHERE ${scope}) AS total
                   FROM orchestrations WHERE ${scope} ${request.after === null ? sql`` : sql`AND id > ${request.after}`}
                   ORDER BY id LIMIT ${request.limit}`
      }
    })

    const count = (tenantId: TenantId, activeOnly: boolean) =>
      sql<{ total: number }>`SELECT count(*)::int AS total FROM orchestrations WHERE ${
        sql.and([sql`tenant_id = ${tenantId}`, ...(activeOnly ? [sql`status = 'active'`] : [])])
      }`.pipe(Effect.map((rows) => rows[0]?.total ?? 0))

    const list = Effect.fn("OrchestrationsRepo.list")(function*(tenantId: TenantId, options: {
      readonly activeOnly: boolean
      readonly after: string | null
      readonly limit: number
    }) {
      // One extra row tells whether another page follows.
      const rows = yield* page({ tenantId, activeOnly: options.activeOnly, after: options.after, limit: options.limit + 1 })
      const total = rows.length > 0 ? rows[0]!.total : yield* count(tenantId, options.activeOnly)
      return pageOf(rows, options.limit, total)
    }, Effect.orDie)

    const insert = SqlSchema.findOne({
      Request: Schema.Struct({
        tenantId: Schema.String,
        name: Schema.String,
        description: Schema.String,
        status: Schema.String,
        steps: Schema.Unknown,
        timeoutMs: Schema.Int
      }),
      Result: Orchestration,
      execute: (input) =>
        sql`INSERT INTO orchestrations (id, tenant_id, name, description, status, steps, timeout_ms)
            VALUES (${newId()}, ${input.tenantId}, ${input.name}, ${input.description}, ${input.status},
                    ${sql.json(input.steps)}, ${input.timeoutMs})
            RETURNING ${cols}`
    })

    const findById = SqlSchema.findOneOption({
      Request: Schema.Struct({ tenantId: Schema.String, id: Schema.String }),
      Result: Orchestration,
      execute: ({ id, tenantId }) =>
        sql`SELECT ${cols} FROM orchestrations WHERE tenant_id = ${tenantId} AND id = ${id}`
    })

    const update = SqlSchema.findOneOption({
      Request: Schema.Struct({
        tenantId: Schema.String,
        id: Schema.String,
        name: Schema.NullOr(Schema.String),
        description: Schema.NullOr(Schema.String),
        status: Schema.NullOr(Schema.String),
        steps: Schema.Unknown,
        timeoutMs: Schema.NullOr(Schema.Int)
      }),
      Result: Orchestration,
      // No writable field is nullable, so NULL means "leave as it is".
      execute: (input) =>
        sql`UPDATE orchestrations SET
              name = COALESCE(${input.name}, name),
              description = COALESCE(${input.description}, description),
              status = COALESCE(${input.status}, status),
              steps = ${input.steps === null ? sql`steps` : sql.json(input.steps)},
              timeout_ms = COALESCE(${input.timeoutMs}, timeout_ms),
              updated_at = now()
            WHERE tenant_id = ${input.tenantId} AND id = ${input.id}
            RETURNING ${cols}`
    })

    const remove = (tenantId: TenantId, id: OrchestrationId) =>
      sql`DELETE FROM orchestrations WHERE tenant_id = ${tenantId} AND id = ${id} RETURNING id`.pipe(
        Effect.map((rows) => rows.length > 0)
      )

    // The one read of another feature's table: which of the agents named by
    // steps exist in the tenant, in one statement rather than one per step.
    const existingAgents = (tenantId: TenantId, ids: ReadonlyArray<string>) =>
      sql<{ id: AgentId }>`SELECT id FROM agents WHERE tenant_id = ${tenantId} AND id IN ${sql.in(ids)}`.pipe(
        Effect.map((rows) => new Set<string>(rows.map((row) => row.id)))
      )

    return {
      list,
      insert: (tenantId: TenantId, input: {
        readonly name: string
        readonly description: string
        readonly status: OrchestrationStatus
        readonly steps: ReadonlyArray<Step>
        readonly timeoutMs: number
      }) => insert({ tenantId, ...input }).pipe(Effect.orDie, Effect.withSpan("OrchestrationsRepo.insert")),
      // Ids that cannot exist are not looked up: they are simply not found.
      findById: (tenantId: TenantId, id: OrchestrationId) =>
        isId(id)
          ? findById({ tenantId, id }).pipe(Effect.orDie, Effect.withSpan("OrchestrationsRepo.findById"))
          : Effect.succeed(Option.none()),
      update: (tenantId: TenantId, id: OrchestrationId, input: {
        readonly name?: string | undefined
        readonly description?: string | undefined
        readonly status?: OrchestrationStatus | undefined
        readonly steps?: ReadonlyArray<Step> | undefined
        readonly timeoutMs?: number | undefined
      }) =>
        isId(id)
          ? update({
            tenantId,
            id,
            name: input.name ?? null,
            description: input.description ?? null,
            status: input.status ?? null,
            steps: input.steps ?? null,
            timeoutMs: input.timeoutMs ?? null
          }).pipe(Effect.orDie, Effect.withSpan("OrchestrationsRepo.update"))
          : Effect.succeed(Option.none()),
      remove: (tenantId: TenantId, id: OrchestrationId) =>
        isId(id)
          ? remove(tenantId, id).pipe(Effect.orDie, Effect.withSpan("OrchestrationsRepo.remove"))
          : Effect.succeed(false),
      /** The subset of `ids` that are agents of the tenant (any status). */
      existingAgents: (tenantId: TenantId, ids: ReadonlyArray<string>) => {
        const candidates = ids.filter(isId)
        return candidates.length === 0
          ? Effect.succeed(new Set<string>())
          : existingAgents(tenantId, candidates).pipe(Effect.orDie, Effect.withSpan("OrchestrationsRepo.existingAgents"))
      }
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}

// ---------------------------------------------------------------------------
// Executions: the read model clients poll, written by the workflow
// ---------------------------------------------------------------------------

const executionColumns = `id, orchestration_id, status, output, error, tokens_used,
  (EXTRACT(EPOCH FROM (COALESCE(completed_at, now()) - created_at)) * 1000)::int AS duration_ms,
  created_at, completed_at`

const Snapshot = Schema.Struct({
  tenantId: TenantId,
  status: ExecutionStatus,
  input: Schema.String,
  variables: Schema.Record(Schema.String, Schema.String),
  steps: Schema.Array(Step),
  timeoutMs: Schema.Int,
  createdAt: Schema.Date
})
export type Snapshot = typeof Snapshot.Type

const Claimed = Schema.Struct({
  id: Schema.String,
  orchestrationId: Schema.String,
  status: ExecutionStatus,
  requestHash: Schema.NullOr(Schema.String),
  fresh: Schema.Boolean
})

export class ExecutionsRepo extends Context.Service<ExecutionsRepo>()("agent-host/ExecutionsRepo", {
  make: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const cols = sql.literal(executionColumns)

    /**
     * Stores a new execution, or finds the one its idempotency key already
     * names (keys last 24 hours). Committed before the 202 is sent.
     */
    const insert = (input: {
      readonly id: string
      readonly tenantId: TenantId
      readonly orchestrationId: string
      readonly input: string
      readonly variables: Readonly<Record<string, string>>
      readonly steps: ReadonlyArray<Step>
      readonly timeoutMs: number
      readonly idempotencyKey: string | null
      readonly requestHash: string | null
    }) =>
      Effect.gen(function*() {
        if (input.idempotencyKey !== null) {
          // An expired key may be used again.
          yield* sql`UPDATE executions SET idempotency_key = NULL
                     WHERE tenant_id = ${input.tenantId} AND idempotency_key = ${input.idempotencyKey}
                       AND created_at < now() - interval '24 hours'`
        }
        const claim = sql`
          WITH inserted AS (
            INSERT INTO executions (id, tenant_id, orchestration_id, status, input, variables, steps, timeout_ms,
                                    idempotency_key, request_hash)
            VALUES (${input.id}, ${input.tenantId}, ${input.orchestrationId}, 'pending', ${input.input},
                    ${sql.json(input.variables)}, ${sql.json(input.steps)}, ${input.timeoutMs},
                    ${input.idempotencyKey}, ${input.requestHash})
            ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
            RETURNING id, orchestration_id, status, request_hash, true AS fresh
          )
          SELECT * FROM inserted
          UNION ALL
          SELECT id, orchestration_id, status, request_hash, false AS fresh FROM executions
          WHERE tenant_id = ${input.tenantId} AND idempotency_key = ${input.idempotencyKey}
            AND NOT EXISTS (SELECT 1 FROM inserted)`
        // When another request with the same key commits while this statement
        // waits on it, the insert does nothing and the statement's snapshot
        // cannot see that row yet; the next statement can.
        let rows = yield* claim
        for (let attempt = 0; rows.length === 0 && attempt < 3; attempt++) rows = yield* claim
        return yield* Schema.decodeUnknownEffect(Claimed)(rows[0])
      }).pipe(sql.withTransaction, Effect.orDie, Effect.withSpan("ExecutionsRepo.insert"))

    /** The execution an idempotency key (still valid) names, if any, as insert would find it. */
    const claimedBy = SqlSchema.findOneOption({
      Request: Schema.Struct({ tenantId: Schema.String, idempotencyKey: Schema.String }),
      Result: Claimed,
      execute: ({ tenantId, idempotencyKey }) =>
        sql`SELECT id, orchestration_id, status, request_hash, false AS fresh FROM executions
            WHERE tenant_id = ${tenantId} AND idempotency_key = ${idempotencyKey}
              AND created_at >= now() - interval '24 hours'`
    })

    const get = SqlSchema.findOneOption({
      Request: Schema.Struct({ tenantId: Schema.String, id: Schema.String }),
      Result: Execution,
      execute: ({ tenantId, id }) => sql`SELECT ${cols} FROM executions WHERE tenant_id = ${tenantId} AND id = ${id}`
    })

    // Moves a pending run to running (with its event) and returns its
    // definition, fixed when it was accepted, in one statement. On a run
    // already running it changes nothing; a finished run comes back as it is.
    const begin = SqlSchema.findOne({
      Request: Schema.String,
      Result: Snapshot,
      execute: (id) =>
        sql`WITH started AS (
              UPDATE executions SET status = 'running', started_at = COALESCE(started_at, now())
              WHERE id = ${id} AND status = 'pending'
              RETURNING id, status, output, error, tokens_used
            ), event AS (
              INSERT INTO execution_events (execution_id, type, data)
              SELECT id, 'execution.' || status,
                     jsonb_strip_nulls(jsonb_build_object('status', status, 'output', output, 'error', error, 'tokensUsed', tokens_used))
              FROM started
            )
            SELECT tenant_id, CASE WHEN EXISTS (SELECT 1 FROM started) THEN 'running' ELSE status END AS status,
                   input, variables, steps, timeout_ms, created_at
            FROM executions WHERE id = ${id}`
    })

    const page = SqlSchema.findAll({
      Request: Schema.Struct({
        tenantId: Schema.String,
        orchestrationId: Schema.NullOr(Schema.String),
        status: Schema.NullOr(Schema.String),
        before: Schema.NullOr(Schema.String),
        limit: Schema.Int
      }),
      Result: Schema.Struct({ ...Execution.fields, total: Schema.Int }),
      execute: (r) => {
        const filters = sql.and([
          sql`tenant_id = ${r.tenantId}`,
          ...(r.orchestrationId === null ? [] : [sql`orchestration_id = ${r.orchestrationId}`]),
          ...(r.status === null ? [] : [sql`status = ${r.status}`])
        ])
        return sql`SELECT ${cols}, (SELECT count(*)::int FROM executions WHERE ${filters}) AS total
                   FROM executions WHERE ${filters} ${r.before === null ? sql`` : sql`AND id < ${r.before}`}
                   ORDER BY id DESC LIMIT ${r.limit}`
      }
    })

    /**
     * Moves a status forward (final statuses never change again) and logs the
     * change as an event, in one statement.
     */
    const transition = (id: string, to: ExecutionStatus, fields: {
      readonly output?: string
      readonly error?: string
      readonly tokensUsed?: number
    } = {}) =>
      sql`WITH updated AS (
            UPDATE executions SET
              status = ${to},
              output = COALESCE(${fields.output ?? null}, output),
              error = COALESCE(${fields.error ?? null}, error),
              tokens_used = COALESCE(${fields.tokensUsed ?? null}, tokens_used),
              started_at = CASE WHEN ${to} = 'running' THEN COALESCE(started_at, now()) ELSE started_at END,
              completed_at = CASE WHEN ${to} IN ('completed', 'failed', 'cancelled') THEN now() ELSE completed_at END
            WHERE id = ${id} AND status IN ('pending', 'running')
            RETURNING id, status, output, error, tokens_used
          )
          INSERT INTO execution_events (execution_id, type, data)
          SELECT id, 'execution.' || status,
                 jsonb_strip_nulls(jsonb_build_object('status', status, 'output', output, 'error', error, 'tokensUsed', tokens_used))
          FROM updated
          RETURNING execution_id`.pipe(Effect.map((rows) => rows.length > 0), Effect.withSpan("ExecutionsRepo.transition"))

    /** Logs a step's progress. */
    const stepEvent = (id: string, type: "step.started" | "step.completed", stepId: string, data: object = {}) =>
      sql`INSERT INTO execution_events (execution_id, type, step_id, data)
          VALUES (${id}, ${type}, ${stepId}, ${sql.json(data)})`.pipe(Effect.asVoid, Effect.withSpan("ExecutionsRepo.stepEvent"))

    /**
     * Fails every unfinished execution past its timeout (plus `graceSeconds`,
     * so a live run records its own timeout first), whatever its workflow's
     * state, with its event; returns their ids.
     */
    const failTimedOut = (graceSeconds: number) =>
      sql<{ id: string }>`WITH reaped AS (
            UPDATE executions SET status = 'failed',
              error = 'The execution timed out after ' || timeout_ms || ' ms',
              completed_at = now()
            WHERE status IN ('pending', 'running')
              AND created_at < now() - make_interval(secs => timeout_ms / 1000.0 + ${graceSeconds})
            RETURNING id, status, output, error, tokens_used
          ), event AS (
            INSERT INTO execution_events (execution_id, type, data)
            SELECT id, 'execution.' || status,
                   jsonb_strip_nulls(jsonb_build_object('status', status, 'output', output, 'error', error, 'tokensUsed', tokens_used))
            FROM reaped
          )
          SELECT id FROM reaped`.pipe(
        Effect.map((rows) => rows.map((row) => row.id)),
        Effect.orDie,
        Effect.withSpan("ExecutionsRepo.failTimedOut")
      )

    /** Events after `afterId`, oldest first. */
    const events = (id: string, afterId: string) =>
      sql<{ id: string; type: string; stepId: string | null; data: unknown; createdAt: Date }>`
        SELECT id::text AS id, type, step_id, data, created_at FROM execution_events
        WHERE execution_id = ${id} AND execution_events.id > ${afterId}::bigint
        ORDER BY execution_events.id LIMIT 500`.pipe(Effect.orDie)

    /** When an execution's own timeout runs out, for bounding its event streams. */
    const deadline = (tenantId: TenantId, id: string) =>
      isId(id)
        ? sql<{ createdAt: Date; timeoutMs: number }>`
            SELECT created_at, timeout_ms FROM executions WHERE tenant_id = ${tenantId} AND id = ${id}`.pipe(
          Effect.map((rows) =>
            Option.map(Option.fromNullishOr(rows[0]), (row) => new Date(row.createdAt).getTime() + row.timeoutMs)
          ),
          Effect.orDie
        )
        : Effect.succeed(Option.none<number>())

    const unfinished = sql<{ id: string }>`SELECT id FROM executions WHERE status IN ('pending', 'running')`.pipe(
      Effect.map((rows) => rows.map((row) => row.id)),
      Effect.orDie
    )

    /** Executions accepted more than `seconds` ago that have not started yet. */
    const notStarted = (seconds: number) =>
      sql<{ id: string }>`SELECT id FROM executions
        WHERE status = 'pending' AND created_at < now() - make_interval(secs => ${seconds})`.pipe(
        Effect.map((rows) => rows.map((row) => row.id)),
        Effect.orDie
      )

    /** Finished executions whose workflow messages are older than `seconds` and still stored; oldest first. */
    const unpruned = (seconds: number, limit: number) =>
      sql<{ id: string }>`SELECT id FROM executions
        WHERE NOT messages_pruned AND status IN ('completed', 'failed', 'cancelled')
          AND completed_at < now() - make_interval(secs => ${seconds})
        ORDER BY completed_at LIMIT ${limit}`.pipe(
        Effect.map((rows) => rows.map((row) => row.id)),
        Effect.orDie
      )

    /**
     * Deletes the cluster's stored messages (and their replies) of these
     * finished executions' workflows, given the workflows' entity ids, and
     * marks the executions as pruned; in one transaction.
     */
    const pruneMessages = (ids: ReadonlyArray<string>, entityType: string, entityIds: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        yield* sql`DELETE FROM cluster_replies WHERE request_id IN (
                     SELECT id FROM cluster_messages WHERE entity_type = ${entityType} AND entity_id IN ${sql.in(entityIds)})`
        yield* sql`DELETE FROM cluster_messages WHERE entity_type = ${entityType} AND entity_id IN ${sql.in(entityIds)}`
        yield* sql`UPDATE executions SET messages_pruned = true WHERE id IN ${sql.in(ids)}`
      }).pipe(sql.withTransaction, Effect.orDie, Effect.withSpan("ExecutionsRepo.pruneMessages"))

    return {
      unpruned,
      pruneMessages,
      notStarted,
      insert,
      claimedBy: (tenantId: TenantId, idempotencyKey: string) =>
        claimedBy({ tenantId, idempotencyKey }).pipe(Effect.orDie, Effect.withSpan("ExecutionsRepo.claimedBy")),
      get: (tenantId: TenantId, id: string) =>
        isId(id) ? get({ tenantId, id }).pipe(Effect.orDie) : Effect.succeed(Option.none()),
      // The workflow's statements keep their errors typed: it retries what is
      // transient and fails the execution with what is not (ExecutionWorkflow.ts).
      begin: (id: string) => begin(id).pipe(Effect.withSpan("ExecutionsRepo.begin")),
      page: (tenantId: TenantId, options: {
        readonly orchestrationId: string | null
        readonly status: string | null
        readonly before: string | null
        readonly limit: number
      }) => page({ tenantId, ...options }).pipe(Effect.orDie),
      transition,
      stepEvent,
      failTimedOut,
      events,
      deadline,
      unfinished
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
