import { Context, Effect, Layer, Schema } from "effect"
import { SqlSchema } from "effect/sql"
import { Plan } from "../Auth/Api.ts"
import { CounterSql } from "../Database/Sql.ts"
import type { TenantId } from "../Domain/Ids.ts"

const Consumed = Schema.Struct({
  before: Schema.Int,
  after: Schema.Int,
  plan: Plan
})

const Usage = Schema.Struct({ plan: Plan, used: Schema.Int })

/** The SQL of request counting, on the counting pool. */
export class BillingRepo extends Context.Service<BillingRepo>()("agent-host/BillingRepo", {
  make: Effect.gen(function*() {
    const sql = yield* CounterSql

    const ensureDay = (tenantId: TenantId, day: string) =>
      sql`INSERT INTO daily_usage (tenant_id, day, count) VALUES (${tenantId}, ${day}, 0)
          ON CONFLICT DO NOTHING`.pipe(Effect.asVoid, Effect.orDie)

    /**
     * Counts up to `n` requests of a tenant's day, never past its plan's limit,
     * in one statement: the row lock taken by FOR UPDATE makes concurrent
     * batches from any number of nodes add up exactly. The plan is read in the
     * same statement, so a plan change counts from the very next batch.
     */
    const consume = SqlSchema.findOne({
      Request: Schema.Struct({
        tenantId: Schema.String,
        day: Schema.String,
        n: Schema.Int,
        freeLimit: Schema.Int,
        proLimit: Schema.Int
      }),
      Result: Consumed,
      execute: (r) =>
        sql`WITH current AS (
              SELECT count FROM daily_usage WHERE tenant_id = ${r.tenantId} AND day = ${r.day} FOR UPDATE
            ),
            tenant AS (
              SELECT plan, CASE plan WHEN 'free' THEN ${r.freeLimit}::int WHEN 'pro' THEN ${r.proLimit}::int END AS day_limit
              FROM tenants WHERE id = ${r.tenantId}
            ),
            counted AS (
              UPDATE daily_usage u
              SET count = CASE WHEN tenant.day_limit IS NULL THEN current.count + ${r.n}
                               ELSE GREATEST(current.count, LEAST(current.count + ${r.n}, tenant.day_limit)) END
              FROM current, tenant
              WHERE u.tenant_id = ${r.tenantId} AND u.day = ${r.day}
              RETURNING u.count
            )
            SELECT current.count AS before, counted.count AS after, tenant.plan
            FROM current, counted, tenant`
    })

    const usage = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: Schema.String, day: Schema.String }),
      Result: Usage,
      execute: (r) =>
        sql`SELECT t.plan, COALESCE(u.count, 0) AS used
            FROM tenants t LEFT JOIN daily_usage u ON u.tenant_id = t.id AND u.day = ${r.day}
            WHERE t.id = ${r.tenantId}`
    })

    return {
      ensureDay,
      consume: (request: typeof consume extends (r: infer R) => any ? R : never) =>
        consume(request).pipe(Effect.orDie, Effect.withSpan("BillingRepo.consume")),
      usage: (tenantId: TenantId, day: string) =>
        usage({ tenantId, day }).pipe(Effect.orDie, Effect.withSpan("BillingRepo.usage"))
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
