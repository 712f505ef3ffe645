import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { SqlSchema } from "effect/sql"
import { type AgentId, isId, newId, type OrchestrationId, type TenantId } from "../Domain/Ids.ts"
import { Orchestration, type OrchestrationStatus, type Step } from "./Api.ts"

const columns = "id, name, description, status, steps, timeout_ms, created_at, updated_at"

/** All SQL of orchestrations; every statement is scoped by tenant. */
export class OrchestrationsRepo extends Context.Service<OrchestrationsRepo>()("agent-host/OrchestrationsRepo", {
  make: Effect.gen(function*() {
    // The Postgres client itself, for `sql.json` (jsonb parameters).
    const sql = yield* PgClient.PgClient
    const cols = sql.literal(columns)

    // The client turns jsonb keys camelCase on the way out and snake_case on
    // the way in (as it does column names), so `agentId` is stored as
    // `agent_id`; Orchestration decodes the steps read back.

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
      const hasMore = rows.length > options.limit
      const data = (hasMore ? rows.slice(0, options.limit) : rows).map(({ total: _, ...orchestration }) => orchestration)
      return { data, total, lastId: hasMore ? data[data.length - 1]!.id : null }
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
