import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import type { Plan } from "../Auth/Api.ts"
import { AppConfig, type PlanQuotas, type PlanQuotasByPlan, quotaVariables } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { QuotaReached, StorageQuotaExceeded } from "../Domain/Problems.ts"
import { type CountedQuota, LimitsRepo } from "./Repo.ts"
import * as Traced from "../Observability/Traced.ts"

export type QuotaName = keyof PlanQuotas

/** The plan's limit of `quota`; null: unlimited. */
export const limitFor = (quotas: PlanQuotasByPlan, plan: Plan, quota: QuotaName): number | null => quotas[plan][quota]

/** The setting that holds the plan's limit, as the operator sets it: FREE_MAX_AGENTS. */
export const settingFor = (plan: Plan, quota: QuotaName) => `${plan.toUpperCase()}_${quotaVariables[quota]}`

const described: Record<QuotaName, string> = {
  knowledgeBases: "knowledge bases",
  documents: "documents",
  storedBytes: "bytes of documents",
  chunks: "chunks",
  agents: "agents",
  orchestrations: "orchestrations",
  teams: "teams",
  apiKeys: "API keys",
  webhookEndpoints: "webhook URLs",
  secrets: "secrets",
  tools: "tools"
}

const refusalFields = (plan: Plan, quota: QuotaName, limit: number, used: number, requested: number) => {
  const setting = settingFor(plan, quota)
  return {
    detail:
      `The ${plan} plan allows ${limit} ${described[quota]} (${setting}); the tenant has ${used}` +
      (requested === 1 ? "" : ` and this request would add ${requested}`) +
      ". Delete some, or move to a larger plan.",
    quota,
    setting,
    plan,
    limit,
    used,
    requested
  }
}

/**
 * The refusal of a request that would take the tenant past a quota (429),
 * naming the quota, its setting, the limit, what the tenant has and what
 * the request would add.
 */
export const quotaReached = (
  plan: Plan,
  quota: Exclude<QuotaName, "storedBytes">,
  limit: number,
  used: number,
  requested: number
) => new QuotaReached(refusalFields(plan, quota, limit, used, requested))

/** The same for stored bytes: a 413. */
export const storageExceeded = (plan: Plan, limit: number, used: number, requested: number) =>
  new StorageQuotaExceeded(refusalFields(plan, "storedBytes", limit, used, requested))

// A failure of the transaction itself (BEGIN, COMMIT) is a defect, as the
// repositories' own SQL failures are.
const sqlErrorsAsDefects = <A, E, R>(
  effect: Effect.Effect<A, E | SqlError, R>
): Effect.Effect<A, Exclude<E, SqlError>, R> =>
  Effect.catchIf(effect, isSqlError, Effect.die) as Effect.Effect<A, Exclude<E, SqlError>, R>

/**
 * The per-plan quotas of what a tenant keeps (PlanQuotas in Config.ts).
 * A create runs in a transaction that first locks the tenant's row, then
 * counts, then inserts: concurrent creates of one tenant, from any node, are
 * counted one after the other, so none passes the limit with another.
 */
export class Limits extends Context.Service<Limits>()("agent-host/Limits", {
  make: Effect.gen(function* () {
    const config = yield* AppConfig
    const repo = yield* LimitsRepo
    const sql = yield* SqlClient.SqlClient

    /**
     * Runs `create` (one more of `quota`) in a transaction, after checking
     * under the tenant's lock that the plan has room for it.
     */
    const admit = <A, E, R>(tenantId: TenantId, quota: CountedQuota, create: Effect.Effect<A, E, R>) =>
      Effect.gen(function* () {
        const plan = yield* repo.lockTenant(tenantId)
        const limit = limitFor(config.planQuotas, plan, quota)
        if (limit !== null) {
          const used = yield* repo.count(tenantId, quota)
          if (used + 1 > limit) return yield* quotaReached(plan, quota, limit, used, 1)
        }
        return yield* create
      }).pipe(sql.withTransaction, sqlErrorsAsDefects, Traced.withSpan("Limits.admit", { attributes: { quota } }))

    /**
     * Runs `create` (an upload of `documents` documents of `bytes` bytes in
     * all) in a transaction, after checking under the tenant's lock that the
     * plan has room for them: documents and stored bytes, and at least one
     * chunk (a tenant at its chunk limit uploads nothing more; ingestion
     * checks each document's chunks when it writes them).
     */
    const admitUpload = <A, E, R>(
      tenantId: TenantId,
      adding: { readonly documents: number; readonly bytes: number },
      create: Effect.Effect<A, E, R>
    ) =>
      Effect.gen(function* () {
        const plan = yield* repo.lockTenant(tenantId)
        const quotas = config.planQuotas[plan]
        if (quotas.documents !== null || quotas.storedBytes !== null || quotas.chunks !== null) {
          const used = yield* repo.knowledgeUsage(tenantId)
          if (quotas.storedBytes !== null && used.storedBytes + adding.bytes > quotas.storedBytes) {
            return yield* storageExceeded(plan, quotas.storedBytes, used.storedBytes, adding.bytes)
          }
          if (quotas.documents !== null && used.documents + adding.documents > quotas.documents) {
            return yield* quotaReached(plan, "documents", quotas.documents, used.documents, adding.documents)
          }
          if (quotas.chunks !== null && used.chunks >= quotas.chunks) {
            return yield* quotaReached(plan, "chunks", quotas.chunks, used.chunks, 1)
          }
        }
        return yield* create
      }).pipe(sql.withTransaction, sqlErrorsAsDefects, Traced.withSpan("Limits.admitUpload"))

    return { admit, admitUpload } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(LimitsRepo.layer))
}
