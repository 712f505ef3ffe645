import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { tenantPage } from "../Database/Page.ts"
import * as TenantRepo from "../Database/TenantRepo.ts"
import type { AgentId, TenantId } from "../Domain/Ids.ts"
import { Agent, Conversation, Turn } from "./Api.ts"
import * as Traced from "../Observability/Traced.ts"

/** Notified with `tenantId/agentId` when an agent is made, changed or deleted, in the same transaction. */
export const agentChangedChannel = "agent_changed"

/** All SQL of agents; every statement is scoped by tenant. */
export class AgentsRepo extends Context.Service<AgentsRepo>()("agent-host/AgentsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const agents = yield* TenantRepo.make(Agent, {
      table: "agents",
      spanPrefix: "AgentsRepo",
      jsonb: ["responseFormat"],
      filters: { active: "status = 'active'" },
      // Agents and the pages of their lists, as last read, for the request and
      // run paths (a chat, a step, the key-authenticated list). Changes reach
      // every node at once through notifications; the time to live only bounds
      // what a missed one could cost.
      changes: {
        channel: agentChangedChannel,
        what: "Agent",
        timeToLive: Duration.minutes(5),
        capacity: 10_000,
        pages: { capacity: 10_000, perTenant: 64 }
      }
    })

    // --- conversations -----------------------------------------------------

    /** A conversation's turns as `row`, `order`ed by index, from past `bound` (an index) when there is one. */
    const turnsOf = <S extends Schema.Codec<any, any, never, never>>(
      name: string,
      row: S,
      columns: string,
      order: "ASC" | "DESC"
    ) => {
      const decode = Schema.decodeUnknownEffect(Schema.Array(row))
      return (
        tenantId: TenantId,
        agentId: AgentId,
        conversationId: string,
        page: {
          readonly bound: number | null
          readonly limit: number
        }
      ) =>
        sql`SELECT ${sql.literal(columns)} FROM conversation_turns
            WHERE tenant_id = ${tenantId} AND agent_id = ${agentId} AND conversation_id = ${conversationId}
            ${page.bound === null ? sql`` : order === "ASC" ? sql`AND seq > ${page.bound}` : sql`AND seq < ${page.bound}`}
            ORDER BY seq ${sql.literal(order)} LIMIT ${page.limit}`.pipe(
          Effect.flatMap(decode),
          Effect.orDie,
          Traced.withSpan(`AgentsRepo.${name}`)
        )
    }

    // Oldest first, a page at a time: a long conversation is never read whole.
    const turnColumns = `seq AS index, message, reply, model, input_tokens, output_tokens,
      input_tokens + output_tokens AS tokens, created_at, completed_at`
    const turnPage = turnsOf("turnPage", Turn, turnColumns, "ASC")

    // Newest first, for the entity to take what fits its budget and stop.
    const RecentTurn = Schema.Struct({ seq: Schema.Int, message: Schema.String, reply: Schema.String })
    const recentTurns = turnsOf("recentTurns", RecentTurn, "seq, message, reply", "DESC")

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

    const conversationColumns = "id, turn_count AS turns, created_at, updated_at"
    const conversations = (
      tenantId: TenantId,
      agentId: AgentId,
      page: { readonly after: string | null; readonly limit: number }
    ) =>
      tenantPage({
        table: "conversations",
        columns: conversationColumns,
        row: Conversation,
        tenantId,
        ...page,
        filters: [sql`agent_id = ${agentId}`]
      }).pipe(Effect.orDie, Traced.withSpan("AgentsRepo.conversations"))

    const forget = (tenantId: TenantId, agentId: AgentId, conversationId: string) =>
      sql`DELETE FROM conversations WHERE tenant_id = ${tenantId} AND agent_id = ${agentId} AND id = ${conversationId}
          RETURNING id`.pipe(
        Effect.map((rows) => rows.length > 0),
        Effect.orDie,
        Traced.withSpan("AgentsRepo.forget")
      )

    return {
      turnPage,
      recentTurns,
      turnCount,
      appendTurn,
      conversations,
      forget,
      ...agents
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
