import { PgClient } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as NotifiedCache from "../Database/NotifiedCache.ts"
import type { TenantId } from "../Domain/Ids.ts"
import * as Traced from "../Observability/Traced.ts"
import { approvalFields, approvalPolicy, type Tool } from "../Tools/Tool.ts"
import type { ApprovalDefaultsInput } from "./Api.ts"

// A tenant's defaults for the approval fields of a tool's policy
// (docs/approvals.md#tenant-defaults), in `tenant_settings` (migration 0036):
// a tool that leaves a field out takes the tenant's, and a tenant that set
// none has the service's (`never`, a day, `reject`).

/** The defaults as stored: only the fields the tenant set. */
export const StoredApprovalDefaults = Schema.Struct(approvalFields)
export type StoredApprovalDefaults = typeof StoredApprovalDefaults.Type

const decodeStored = Schema.decodeUnknownOption(StoredApprovalDefaults)

/** `tools` with the tenant's defaults (`stored`) in each approval field their policy leaves out. */
export const applyDefaults = (stored: StoredApprovalDefaults, tools: ReadonlyArray<Tool>): ReadonlyArray<Tool> =>
  Object.keys(stored).length === 0 ? tools : tools.map((tool) => ({ ...tool, policy: { ...stored, ...tool.policy } }))

/** The channel a change of a tenant's settings is told on (`<tenantId>/settings`). */
export const settingsChangedChannel = "tenant_settings_changed"

export class ApprovalDefaults extends Context.Service<ApprovalDefaults>()("agent-host/ApprovalDefaults", {
  make: Effect.gen(function* () {
    const sql = yield* PgClient.PgClient

    const read = (tenantId: TenantId) =>
      sql<{ toolPolicy: unknown; updatedAt: Date }>`
        SELECT tool_policy, updated_at FROM tenant_settings WHERE tenant_id = ${tenantId}`.pipe(
        Effect.map((rows) => ({
          stored: rows[0] === undefined ? {} : Option.getOrElse(decodeStored(rows[0].toolPolicy), () => ({})),
          updatedAt: rows[0]?.updatedAt ?? null
        })),
        Effect.orDie,
        Traced.withSpan("ApprovalDefaults.read")
      )

    const view = ({
      stored,
      updatedAt
    }: {
      readonly stored: StoredApprovalDefaults
      readonly updatedAt: Date | null
    }) => {
      const filled = approvalPolicy(stored)
      return {
        approval: filled.approval,
        approvalTimeoutMs: filled.timeoutMs,
        approvalOnExpiry: filled.onExpiry,
        updatedAt
      }
    }

    // What the runs' and chats' tool loads read, kept on each node until a
    // change is told (a tenant that set nothing is kept too, as `{}`).
    const cache = yield* NotifiedCache.make({
      channel: settingsChangedChannel,
      what: "Tenant settings",
      lookup: ({ tenantId }) => Effect.map(read(tenantId as TenantId), (row) => Option.some(row.stored)),
      timeToLive: Duration.minutes(5),
      capacity: 10_000
    })

    /** The tenant's defaults, the service's filling what it did not set. */
    const get = (tenantId: TenantId) => Effect.map(read(tenantId), view)

    /** Sets the fields sent; those left out keep their value, those sent as `null` are removed. */
    const set = (tenantId: TenantId, input: ApprovalDefaultsInput) =>
      sql<{ toolPolicy: unknown; updatedAt: Date }>`
        WITH written AS (
          INSERT INTO tenant_settings (tenant_id, tool_policy) VALUES (${tenantId}, jsonb_strip_nulls(${sql.json(input)}))
          ON CONFLICT (tenant_id) DO UPDATE
            SET tool_policy = jsonb_strip_nulls(tenant_settings.tool_policy || ${sql.json(input)}), updated_at = now()
          RETURNING tenant_id, tool_policy, updated_at
        )
        SELECT tool_policy, updated_at, pg_notify(${settingsChangedChannel}, tenant_id || '/settings') FROM written`.pipe(
        // This node's next read sees it at once; the others' on the notification.
        Effect.ensuring(cache.forget(tenantId, "settings")),
        Effect.map((rows) =>
          view({
            stored: Option.getOrElse(decodeStored(rows[0]!.toolPolicy), () => ({})),
            updatedAt: rows[0]!.updatedAt
          })
        ),
        Effect.orDie,
        Traced.withSpan("ApprovalDefaults.set")
      )

    /** What the tenant set, for `applyDefaults`. */
    const stored = (tenantId: TenantId) =>
      Effect.map(
        cache.get(tenantId, "settings"),
        Option.getOrElse((): StoredApprovalDefaults => ({}))
      )

    /** Whether this node hears changes now (until then, `stored` reads the database each time). */
    const listening = cache.listening

    return { get, set, stored, listening } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
