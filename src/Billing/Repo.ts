import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as SqlSchema from "effect/sql/SqlSchema"
import { Plan } from "../Auth/Api.ts"
import { UsageDay } from "./Api.ts"
import { CounterSql } from "../Database/Sql.ts"
import { TenantId } from "../Domain/Ids.ts"
import type { Applied, Envelope } from "./Webhook.ts"
import * as Traced from "../Platform/Traced.ts"

type StripeEvent = typeof Envelope.Type

const Consumed = Schema.Struct({
  before: Schema.Int,
  after: Schema.Int,
  plan: Plan,
  /** Model tokens used so far today. */
  tokens: Schema.Number
})

const Usage = Schema.Struct({ plan: Plan, used: Schema.Int, tokens: Schema.Number })

/** The SQL of request and token counting: writes on the counting pool, reads on the main one. */
export class BillingRepo extends Context.Service<BillingRepo>()("agent-host/BillingRepo", {
  make: Effect.gen(function*() {
    const sql = yield* CounterSql
    // Reading a day's standing commits nothing: it leaves the counting pool's
    // few connections to the counts themselves.
    const reads = yield* SqlClient.SqlClient

    const ensureDay = (tenantId: TenantId, day: string) =>
      sql`INSERT INTO daily_usage (tenant_id, day, count) VALUES (${tenantId}, ${day}, 0)
          ON CONFLICT DO NOTHING`.pipe(Effect.asVoid, Effect.orDie)

    /**
     * Counts up to `n` requests of a tenant's day, never past its plan's limit,
     * and `answered` requests whatever the limit (they were served already, on
     * a plan without one), and adds `tokens` model tokens, in one statement:
     * the row lock taken by FOR UPDATE makes concurrent batches from any
     * number of nodes add up exactly. The plan is read in the same statement,
     * so a plan change counts from the very next batch.
     */
    // No row when the day's row is missing (an operator deleted it to reset a
    // tenant's usage, or a restored backup lacks it): the caller creates it
    // and counts again.
    const consume = SqlSchema.findOneOption({
      Request: Schema.Struct({
        tenantId: Schema.String,
        day: Schema.String,
        n: Schema.Int,
        answered: Schema.Int,
        tokens: Schema.Int,
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
              SET count = ${r.answered} + CASE WHEN tenant.day_limit IS NULL THEN current.count + ${r.n}
                               ELSE GREATEST(current.count, LEAST(current.count + ${r.n}, tenant.day_limit)) END,
                  tokens = u.tokens + ${r.tokens}
              FROM current, tenant
              WHERE u.tenant_id = ${r.tenantId} AND u.day = ${r.day}
              RETURNING u.count, u.tokens
            )
            SELECT current.count AS before, counted.count - ${r.answered} AS after, tenant.plan, counted.tokens::float8 AS tokens
            FROM current, counted, tenant`
    })

    const usage = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: Schema.String, day: Schema.String }),
      Result: Usage,
      execute: (r) =>
        reads`SELECT t.plan, COALESCE(u.count, 0) AS used, COALESCE(u.tokens, 0)::float8 AS tokens
            FROM tenants t LEFT JOIN daily_usage u ON u.tenant_id = t.id AND u.day = ${r.day}
            WHERE t.id = ${r.tenantId}`
    })

    /** Requests and tokens per UTC day from `from` to `to` (YYYY-MM-DD, inclusive), a row for every day. */
    const history = SqlSchema.findAll({
      Request: Schema.Struct({ tenantId: Schema.String, from: Schema.String, to: Schema.String }),
      Result: UsageDay,
      execute: (r) =>
        reads`SELECT to_char(d, 'YYYY-MM-DD') AS day, COALESCE(u.count, 0) AS requests, COALESCE(u.tokens, 0)::float8 AS tokens
            FROM generate_series(${r.from}::date, ${r.to}::date, interval '1 day') AS d
            LEFT JOIN daily_usage u ON u.tenant_id = ${r.tenantId} AND u.day = d::date
            ORDER BY d`
    })

    /**
     * Adds model tokens to a tenant's day in one statement (the row lock of
     * the upsert makes concurrent additions from any node add up exactly);
     * a missing row is created, whatever happened to it.
     */
    const chargeTokens = (tenantId: TenantId, day: string, tokens: number) =>
      sql`INSERT INTO daily_usage (tenant_id, day, count, tokens) VALUES (${tenantId}, ${day}, 0, ${tokens})
          ON CONFLICT (tenant_id, day) DO UPDATE SET tokens = daily_usage.tokens + EXCLUDED.tokens`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("BillingRepo.chargeTokens")
      )

    return {
      ensureDay,
      history: (tenantId: TenantId, from: string, to: string) =>
        history({ tenantId, from, to }).pipe(Effect.orDie, Traced.withSpan("BillingRepo.history")),
      chargeTokens,
      consume: (request: typeof consume extends (r: infer R) => any ? R : never) =>
        consume(request).pipe(Effect.orDie, Traced.withSpan("BillingRepo.consume")),
      usage: (tenantId: TenantId, day: string) =>
        usage({ tenantId, day }).pipe(Effect.orDie, Traced.withSpan("BillingRepo.usage"))
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}

// ---------------------------------------------------------------------------
// The Stripe webhook
// ---------------------------------------------------------------------------

const TenantLink = Schema.Struct({
  id: TenantId,
  stripeCustomerId: Schema.NullOr(Schema.String),
  stripeSubscriptionId: Schema.NullOr(Schema.String),
  subscriptionStatus: Schema.NullOr(Schema.String),
  subscriptionEventAt: Schema.NullOr(Schema.Date)
})
type TenantLink = typeof TenantLink.Type

const decodeTenantLinks = Schema.decodeUnknownEffect(Schema.Array(TenantLink))

/** Stripe events received, and the Stripe side of tenants. Callers run these inside one transaction. */
export class StripeWebhookRepo extends Context.Service<StripeWebhookRepo>()("agent-host/StripeWebhookRepo", {
  make: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /**
     * Claims the event id. False when it was claimed before; a concurrent
     * delivery of the same id waits here until the first one commits or
     * rolls back, so an event is never applied twice.
     */
    const claimEvent = (event: StripeEvent) =>
      sql<{ id: string }>`
        INSERT INTO stripe_events (id, type, created, outcome)
        VALUES (${event.id}, ${event.type}, to_timestamp(${event.created}), 'processed')
        ON CONFLICT (id) DO NOTHING
        RETURNING id`.pipe(
        Effect.map((rows) => rows.length > 0),
        Effect.orDie,
        Traced.withSpan("StripeWebhookRepo.claimEvent")
      )

    const recordOutcome = (id: string, applied: Applied) =>
      sql`UPDATE stripe_events SET outcome = ${applied.outcome}, tenant_id = ${applied.tenantId}, error = ${applied.reason}
          WHERE id = ${id}`.pipe(Effect.asVoid, Effect.orDie, Traced.withSpan("StripeWebhookRepo.recordOutcome"))

    // FOR UPDATE: events of one tenant apply one at a time, so the ordering
    // check below cannot race another delivery.
    const lockTenant = (where: { readonly id: string } | { readonly customer: string }) =>
      ("id" in where
        ? sql`SELECT id, stripe_customer_id, stripe_subscription_id, subscription_status, subscription_event_at
              FROM tenants WHERE id = ${where.id} FOR UPDATE`
        : sql`SELECT id, stripe_customer_id, stripe_subscription_id, subscription_status, subscription_event_at
              FROM tenants WHERE stripe_customer_id = ${where.customer} FOR UPDATE`).pipe(
          Effect.flatMap(decodeTenantLinks),
          Effect.map((rows) => Option.fromNullishOr(rows[0])),
          Effect.orDie,
          Traced.withSpan("StripeWebhookRepo.lockTenant")
        )

    const linkCustomer = (tenantId: TenantId, customer: string, subscription: string | null) =>
      sql`UPDATE tenants
          SET stripe_customer_id = ${customer},
              stripe_subscription_id = COALESCE(${subscription}, stripe_subscription_id),
              updated_at = now()
          WHERE id = ${tenantId}`.pipe(Effect.asVoid, Effect.orDie, Traced.withSpan("StripeWebhookRepo.linkCustomer"))

    const applySubscription = (tenantId: TenantId, change: {
      readonly plan: Plan
      readonly customer: string
      readonly subscription: string
      readonly status: string
      readonly eventCreated: number
    }) =>
      sql`UPDATE tenants
          SET plan = ${change.plan},
              stripe_customer_id = ${change.customer},
              stripe_subscription_id = ${change.subscription},
              subscription_status = ${change.status},
              subscription_event_at = to_timestamp(${change.eventCreated}),
              updated_at = now()
          WHERE id = ${tenantId}`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("StripeWebhookRepo.applySubscription")
      )

    return { claimEvent, recordOutcome, lockTenant, linkCustomer, applySubscription } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
