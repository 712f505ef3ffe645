import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { isSqlError } from "effect/sql/SqlError"
import * as TenantRepo from "../Database/TenantRepo.ts"
import { isId, type TenantId } from "../Domain/Ids.ts"
import { Conflict } from "../Domain/Problems.ts"
import * as Traced from "../Observability/Traced.ts"
import { Tool } from "./Tool.ts"

/** Notified with `tenantId/toolId` when a tool is made, changed or deleted, in the same transaction. */
export const toolChangedChannel = "tool_changed"

/** A write that would give a second tool of the tenant the same name: a 409, whichever request came second. */
const nameTaken = <A, E, R>(name: string | undefined, write: Effect.Effect<A, E, R>) =>
  Effect.catchDefect(write, (defect) =>
    isSqlError(defect) &&
    defect.reason._tag === "UniqueViolation" &&
    defect.reason.constraint === "tools_tenant_name_key"
      ? Effect.fail(new Conflict({ detail: `The tenant already has a tool named ${JSON.stringify(name)}` }))
      : Effect.die(defect)
  )

/** All SQL of tools; every statement is scoped by tenant. */
export class ToolsRepo extends Context.Service<ToolsRepo>()("agent-host/ToolsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const tools = yield* TenantRepo.make(Tool, {
      table: "tools",
      spanPrefix: "ToolsRepo",
      expressions: { kind: "settings->>'kind'" },
      jsonb: ["parameters", "settings", "policy"],
      // Tools as last read, for the run paths that will call them; changes
      // reach every node through notifications.
      changes: {
        channel: toolChangedChannel,
        what: "Tool",
        timeToLive: Duration.minutes(5),
        capacity: 10_000
      }
    })

    /** The subset of `ids` that are active tools of the tenant. */
    const activeIds = (tenantId: TenantId, ids: ReadonlyArray<string>) => {
      const candidates = ids.filter(isId)
      return candidates.length === 0
        ? Effect.succeed(new Set<string>())
        : sql<{ id: string }>`SELECT id FROM tools
            WHERE tenant_id = ${tenantId} AND status = 'active' AND id IN ${sql.in(candidates)}`.pipe(
            Effect.map((rows) => new Set(rows.map((row) => row.id))),
            Effect.orDie,
            Traced.withSpan("ToolsRepo.activeIds")
          )
    }

    // The one read of another feature's table: the agents a tool is given to.
    /** The first `limit` agents of the tenant that have the tool, by id, with how many there are in all. */
    const usedBy = (tenantId: TenantId, toolId: string, limit: number) =>
      sql<{ id: string; name: string; total: number }>`
        SELECT id, name, count(*) OVER ()::int AS total FROM agents
        WHERE tenant_id = ${tenantId} AND ${toolId} = ANY (tool_ids)
        ORDER BY id LIMIT ${limit}`.pipe(Effect.orDie, Traced.withSpan("ToolsRepo.usedBy"))

    return {
      ...tools,
      insert: (tenantId: TenantId, input: Parameters<typeof tools.insert>[1]) =>
        nameTaken(input.name, tools.insert(tenantId, input)),
      update: (tenantId: TenantId, id: string, changes: Parameters<typeof tools.update>[2]) =>
        nameTaken(changes.name, tools.update(tenantId, id, changes)),
      activeIds,
      usedBy
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
