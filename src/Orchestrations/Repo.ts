import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import * as TenantRepo from "../Database/TenantRepo.ts"
import { type AgentId, isId, type TenantId } from "../Domain/Ids.ts"
import { Orchestration } from "./Api.ts"
import * as Traced from "../Observability/Traced.ts"

/** Notified with `tenantId/orchestrationId` when an orchestration is made, changed or deleted, by the changing statement. */
export const orchestrationChangedChannel = "orchestration_changed"

/** All SQL of orchestration definitions; every statement is scoped by tenant. Executions: ExecutionsRepo.ts. */
export class OrchestrationsRepo extends Context.Service<OrchestrationsRepo>()("agent-host/OrchestrationsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // Steps are stored as given, so they keep `agentId` and `dependsOn`.
    const orchestrations = yield* TenantRepo.make(Orchestration, {
      table: "orchestrations",
      spanPrefix: "OrchestrationsRepo",
      jsonb: ["steps"],
      filters: { active: "status = 'active'" },
      // Orchestrations as last read, for the request path (every execute
      // reads its orchestration); changes reach every node through
      // notifications.
      changes: {
        channel: orchestrationChangedChannel,
        what: "Orchestration",
        timeToLive: Duration.minutes(5),
        capacity: 10_000
      }
    })

    // The one read of another feature's table: which of the agents named by
    // steps exist in the tenant, in one statement rather than one per step.
    const existingAgents = (tenantId: TenantId, ids: ReadonlyArray<string>) =>
      sql<{ id: AgentId; toolIds: ReadonlyArray<string> }>`SELECT id, tool_ids FROM agents
        WHERE tenant_id = ${tenantId} AND id IN ${sql.in(ids)}`.pipe(
        Effect.map((rows) => new Map<string, ReadonlySet<string>>(rows.map((row) => [row.id, new Set(row.toolIds)])))
      )

    return {
      ...orchestrations,
      /** Those of `ids` that are agents of the tenant (any status), with the ids of their tools. */
      existingAgents: (tenantId: TenantId, ids: ReadonlyArray<string>) => {
        const candidates = ids.filter(isId)
        return candidates.length === 0
          ? Effect.succeed(new Map<string, ReadonlySet<string>>())
          : existingAgents(tenantId, candidates).pipe(
              Effect.orDie,
              Traced.withSpan("OrchestrationsRepo.existingAgents")
            )
      }
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
