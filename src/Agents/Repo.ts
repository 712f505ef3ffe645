import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as SqlSchema from "effect/sql/SqlSchema"
import { tenantPage } from "../Database/Page.ts"
import * as NotifiedCache from "../Database/NotifiedCache.ts"
import { pageOf } from "../Domain/Cursor.ts"
import { AgentId, isId, newId, type TenantId } from "../Domain/Ids.ts"
import { Agent, type AgentStatus, Conversation, Turn, type UpdateAgent } from "./Api.ts"
import * as Traced from "../Platform/Traced.ts"

const columns = "id, name, description, model, instructions, status, memory_enabled, knowledge_ids, created_at, updated_at"

/** Notified with `tenantId/agentId` when an agent is made, changed or deleted, in the same transaction. */
export const agentChangedChannel = "agent_changed"

// How long a node trusts an agent it has read. Changes reach every node at
// once through notifications; this only bounds what a missed one could cost.
const agentCacheTtl = Duration.minutes(5)

/** All SQL of agents; every statement is scoped by tenant. */
export class AgentsRepo extends Context.Service<AgentsRepo>()("agent-host/AgentsRepo", {
  make: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const cols = sql.literal(columns)

    const readPage = (tenantId: TenantId, options: {
      readonly activeOnly: boolean
      readonly after: string | null
      readonly limit: number
    }) =>
      tenantPage({
        table: "agents",
        columns,
        row: Agent,
        tenantId,
        filters: options.activeOnly ? [sql`status = 'active'`] : [],
        after: options.after,
        limit: options.limit
      }).pipe(Effect.orDie)

    // Pages of a tenant's agents as last read; any change of one of its agents
    // drops them all, on every node (the cache below tells of changes).
    const pages = NotifiedCache.makeTenantReads<Effect.Success<ReturnType<typeof readPage>>>({
      timeToLive: agentCacheTtl,
      capacity: 10_000,
      perTenant: 64
    })
    const list = (tenantId: TenantId, options: {
      readonly activeOnly: boolean
      readonly after: string | null
      readonly limit: number
    }) =>
      (cache.listening()
        ? pages.get(tenantId, `${options.activeOnly}/${options.limit}/${options.after ?? ""}`, readPage(tenantId, options))
        : readPage(tenantId, options)).pipe(Traced.withSpan("AgentsRepo.list"))

    const insert = SqlSchema.findOne({
      Request: Schema.Struct({
        tenantId: Schema.String,
        name: Schema.String,
        description: Schema.String,
        model: Schema.String,
        instructions: Schema.String,
        status: Schema.String,
        memoryEnabled: Schema.Boolean,
        knowledgeIds: Schema.Array(Schema.String)
      }),
      Result: Agent,
      execute: (input) =>
        sql`WITH inserted AS (INSERT INTO agents (id, tenant_id, name, description, model, instructions, status, memory_enabled, knowledge_ids)
            VALUES (${newId()}, ${input.tenantId}, ${input.name}, ${input.description}, ${input.model},
                    ${input.instructions}, ${input.status}, ${input.memoryEnabled}, ${[...input.knowledgeIds]}::text[])
            RETURNING ${cols}, tenant_id)
            SELECT ${cols}, pg_notify(${agentChangedChannel}, tenant_id || '/' || id) FROM inserted`
    })

    const findById = SqlSchema.findOneOption({
      Request: Schema.Struct({ tenantId: Schema.String, id: Schema.String }),
      Result: Agent,
      execute: ({ id, tenantId }) => sql`SELECT ${cols} FROM agents WHERE tenant_id = ${tenantId} AND id = ${id}`
    })

    const update = SqlSchema.findOneOption({
      Request: Schema.Struct({
        tenantId: Schema.String,
        id: Schema.String,
        name: Schema.NullOr(Schema.String),
        description: Schema.NullOr(Schema.String),
        model: Schema.NullOr(Schema.String),
        instructions: Schema.NullOr(Schema.String),
        status: Schema.NullOr(Schema.String),
        memoryEnabled: Schema.NullOr(Schema.Boolean),
        knowledgeIds: Schema.NullOr(Schema.Array(Schema.String))
      }),
      Result: Agent,
      // No writable field is nullable, so NULL means "leave as it is".
      execute: (input) =>
        sql`WITH changed AS (UPDATE agents SET
              name = COALESCE(${input.name}, name),
              description = COALESCE(${input.description}, description),
              model = COALESCE(${input.model}, model),
              instructions = COALESCE(${input.instructions}, instructions),
              status = COALESCE(${input.status}, status),
              memory_enabled = COALESCE(${input.memoryEnabled}, memory_enabled),
              knowledge_ids = COALESCE(${input.knowledgeIds === null ? null : [...input.knowledgeIds]}::text[], knowledge_ids),
              updated_at = now()
            WHERE tenant_id = ${input.tenantId} AND id = ${input.id}
            RETURNING ${cols}, tenant_id)
            SELECT ${cols}, pg_notify(${agentChangedChannel}, tenant_id || '/' || id) FROM changed`
    })

    const remove = (tenantId: TenantId, id: AgentId) =>
      sql`WITH removed AS (DELETE FROM agents WHERE tenant_id = ${tenantId} AND id = ${id} RETURNING tenant_id, id)
          SELECT id, pg_notify(${agentChangedChannel}, tenant_id || '/' || id) FROM removed`.pipe(
        Effect.map((rows) => rows.length > 0)
      )

    // Agents as last read, by `tenantId/agentId`, for the request and run
    // paths (a chat, a step).
    const cache = yield* NotifiedCache.make({
      channel: agentChangedChannel,
      what: "Agent",
      lookup: findById,
      timeToLive: agentCacheTtl,
      capacity: 10_000,
      onChange: (tenantId) => pages.drop(tenantId)
    })

    // --- conversations -----------------------------------------------------

    // Oldest first, a page at a time: a long conversation is never read whole.
    const turnPage = SqlSchema.findAll({
      Request: Schema.Struct({
        tenantId: Schema.String,
        agentId: Schema.String,
        conversationId: Schema.String,
        after: Schema.NullOr(Schema.Int),
        limit: Schema.Int
      }),
      Result: Turn,
      execute: (request) =>
        sql`SELECT seq AS index, message, reply, model, input_tokens, output_tokens,
                   input_tokens + output_tokens AS tokens, created_at, completed_at
            FROM conversation_turns
            WHERE ${
          sql.and([
            sql`tenant_id = ${request.tenantId}`,
            sql`agent_id = ${request.agentId}`,
            sql`conversation_id = ${request.conversationId}`,
            ...(request.after === null ? [] : [sql`seq > ${request.after}`])
          ])
        } ORDER BY seq LIMIT ${request.limit}`
    })

    // Newest first, for the entity to take what fits its budget and stop.
    const RecentTurn = Schema.Struct({ seq: Schema.Int, message: Schema.String, reply: Schema.String })
    const recentTurns = SqlSchema.findAll({
      Request: Schema.Struct({
        tenantId: Schema.String,
        agentId: Schema.String,
        conversationId: Schema.String,
        before: Schema.NullOr(Schema.Int),
        limit: Schema.Int
      }),
      Result: RecentTurn,
      execute: (request) =>
        sql`SELECT seq, message, reply FROM conversation_turns
            WHERE ${
          sql.and([
            sql`tenant_id = ${request.tenantId}`,
            sql`agent_id = ${request.agentId}`,
            sql`conversation_id = ${request.conversationId}`,
            ...(request.before === null ? [] : [sql`seq < ${request.before}`])
          ])
        } ORDER BY seq DESC LIMIT ${request.limit}`
    })

    const turnCount = (tenantId: TenantId, agentId: AgentId, conversationId: string) =>
      sql<{ turnCount: number }>`SELECT turn_count FROM conversations
                                 WHERE tenant_id = ${tenantId} AND agent_id = ${agentId} AND id = ${conversationId}`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullishOr(rows[0]), (row) => row.turnCount)),
        Effect.orDie,
        Traced.withSpan("AgentsRepo.turnCount")
      )

    /** Stores one turn, creating the conversation on its first. One statement, so a turn is all or nothing. */
    const appendTurn = (turn: {
      readonly tenantId: TenantId
      readonly agentId: AgentId
      readonly conversationId: string
      readonly message: string
      readonly reply: string
      readonly model: string
      readonly inputTokens: number
      readonly outputTokens: number
      readonly createdAt: Date
      readonly completedAt: Date
    }) =>
      sql`WITH conversation AS (
            INSERT INTO conversations (tenant_id, agent_id, id, created_at, updated_at)
            VALUES (${turn.tenantId}, ${turn.agentId}, ${turn.conversationId}, ${turn.createdAt}, ${turn.completedAt})
            ON CONFLICT (tenant_id, agent_id, id) DO UPDATE
              SET turn_count = conversations.turn_count + 1, updated_at = EXCLUDED.updated_at
            RETURNING turn_count
          )
          INSERT INTO conversation_turns (tenant_id, agent_id, conversation_id, seq, message, reply, model,
                                          input_tokens, output_tokens, created_at, completed_at)
          SELECT ${turn.tenantId}, ${turn.agentId}, ${turn.conversationId}, turn_count, ${turn.message}, ${turn.reply},
                 ${turn.model}, ${turn.inputTokens}, ${turn.outputTokens}, ${turn.createdAt}, ${turn.completedAt}
          FROM conversation`.pipe(Effect.asVoid, Effect.orDie, Traced.withSpan("AgentsRepo.appendTurn"))

    const conversationPage = SqlSchema.findAll({
      Request: Schema.Struct({
        tenantId: Schema.String,
        agentId: Schema.String,
        after: Schema.NullOr(Schema.String),
        limit: Schema.Int
      }),
      Result: Conversation,
      execute: (request) =>
        sql`SELECT id, turn_count AS turns, created_at, updated_at FROM conversations
            WHERE ${
          sql.and([
            sql`tenant_id = ${request.tenantId}`,
            sql`agent_id = ${request.agentId}`,
            ...(request.after === null ? [] : [sql`id > ${request.after}`])
          ])
        } ORDER BY id LIMIT ${request.limit}`
    })

    const conversations = Traced.fn("AgentsRepo.conversations")(function*(
      tenantId: TenantId,
      agentId: AgentId,
      options: { readonly after: string | null; readonly limit: number }
    ) {
      const [rows, counted] = yield* Effect.all([
        conversationPage({ tenantId, agentId, after: options.after, limit: options.limit + 1 }),
        sql<{ total: number }>`SELECT count(*)::int AS total FROM conversations
                               WHERE tenant_id = ${tenantId} AND agent_id = ${agentId}`
      ], { concurrency: 2 })
      return pageOf(rows, options.limit, counted[0]?.total ?? 0)
    }, Effect.orDie)

    const forget = (tenantId: TenantId, agentId: AgentId, conversationId: string) =>
      sql`DELETE FROM conversations WHERE tenant_id = ${tenantId} AND agent_id = ${agentId} AND id = ${conversationId}
          RETURNING id`.pipe(Effect.map((rows) => rows.length > 0), Effect.orDie, Traced.withSpan("AgentsRepo.forget"))

    return {
      turnPage: (tenantId: TenantId, agentId: AgentId, conversationId: string, options: {
        readonly after: number | null
        readonly limit: number
      }) =>
        turnPage({ tenantId, agentId, conversationId, ...options }).pipe(
          Effect.orDie,
          Traced.withSpan("AgentsRepo.turnPage")
        ),
      recentTurns: (tenantId: TenantId, agentId: AgentId, conversationId: string, options: {
        readonly before: number | null
        readonly limit: number
      }) =>
        recentTurns({ tenantId, agentId, conversationId, ...options }).pipe(
          Effect.orDie,
          Traced.withSpan("AgentsRepo.recentTurns")
        ),
      turnCount,
      appendTurn,
      conversations,
      forget,
      list,
      insert: (tenantId: TenantId, input: {
        readonly name: string
        readonly description: string
        readonly model: string
        readonly instructions: string
        readonly status: AgentStatus
        readonly memoryEnabled: boolean
        readonly knowledgeIds: ReadonlyArray<string>
      }) =>
        insert({ tenantId, ...input }).pipe(
          // This node's next list sees it at once; the others' on the notification.
          Effect.tap((agent) => cache.forget(tenantId, agent.id)),
          Effect.orDie,
          Traced.withSpan("AgentsRepo.insert")
        ),
      // Ids that cannot exist are not looked up: they are simply not found.
      findById: (tenantId: TenantId, id: AgentId) =>
        isId(id)
          ? cache.get(tenantId, id).pipe(Effect.orDie, Traced.withSpan("AgentsRepo.findById"))
          : Effect.succeed(Option.none()),
      update: (tenantId: TenantId, id: AgentId, input: UpdateAgent) =>
        isId(id)
          ? update({
            tenantId,
            id,
            name: input.name ?? null,
            description: input.description ?? null,
            model: input.model ?? null,
            instructions: input.instructions ?? null,
            status: input.status ?? null,
            memoryEnabled: input.memoryEnabled ?? null,
            knowledgeIds: input.knowledgeIds ?? null
          }).pipe(
            // This node's next read sees the change at once; the others' on the notification.
            Effect.ensuring(cache.forget(tenantId, id)),
            Effect.orDie,
            Traced.withSpan("AgentsRepo.update")
          )
          : Effect.succeed(Option.none()),
      remove: (tenantId: TenantId, id: AgentId) =>
        isId(id)
          ? remove(tenantId, id).pipe(
            Effect.ensuring(cache.forget(tenantId, id)),
            Effect.orDie,
            Traced.withSpan("AgentsRepo.remove")
          )
          : Effect.succeed(false)
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}

