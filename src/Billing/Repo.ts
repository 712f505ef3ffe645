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
import type { Applied, Envelope } from "./Stripe.ts"
import * as Traced from "../Observability/Traced.ts"

type StripeEvent = typeof Envelope.Type

const Consumed = Schema.Struct({
  before: Schema.Int,
  after: Schema.Int,
  plan: Plan,
  /** Model tokens used so far today. */
  tokens: Schema.Number
})

const Usage = Schema.Struct({ plan: Plan, used: Schema.Int, tokens: Schema.Number })

const Reserved = Schema.Struct({
  plan: Plan,
  /** null: the plan has no token budget, and nothing was reserved. */
  budget: Schema.NullOr(Schema.Number),
  /** Tokens reserved when granted: the prompt's plus the plan's max_tokens. */
  estimate: Schema.Number,
  granted: Schema.Boolean,
  /** Model tokens used so far today (not counting reservations). */
  tokens: Schema.Number
})

/** The SQL of request and token counting: writes on the counting pool, reads on the main one. */
export class BillingRepo extends Context.Service<BillingRepo>()("agent-host/BillingRepo", {
  make: Effect.gen(function* () {
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
        released: Schema.Int,
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
                  tokens = u.tokens + ${r.tokens},
                  reserved = GREATEST(0, u.reserved - ${r.released})
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
     * Adds model tokens to a tenant's day and gives back `released` reserved
     * tokens, in one statement (the row lock of the upsert makes concurrent
     * additions from any node add up exactly); a missing row is created,
     * whatever happened to it. Reservations never go below zero: a row an
     * operator reset has none left to give back.
     */
    const chargeTokens = (tenantId: TenantId, day: string, tokens: number, released: number) =>
      sql`INSERT INTO daily_usage (tenant_id, day, count, tokens) VALUES (${tenantId}, ${day}, 0, ${tokens})
          ON CONFLICT (tenant_id, day) DO UPDATE SET tokens = daily_usage.tokens + EXCLUDED.tokens,
            reserved = GREATEST(0, daily_usage.reserved - ${released})`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("BillingRepo.chargeTokens")
      )

    /**
     * Reserves a model call's worst case (`promptTokens` plus its plan's
     * max_tokens) on the tenant's day, if the tokens used and reserved so far
     * are under the plan's budget, in one statement: the upsert's row lock
     * orders concurrent reservations from any node, and each checks the row
     * as the one before left it, so calls running together can pass the
     * budget by one reservation at most. The plan is read in the same
     * statement; a plan without a budget reserves nothing.
     */
    const reserve = SqlSchema.findOneOption({
      Request: Schema.Struct({
        tenantId: Schema.String,
        day: Schema.String,
        promptTokens: Schema.Int,
        freeBudget: Schema.Int,
        proBudget: Schema.Int,
        freeMaxOutput: Schema.Int,
        proMaxOutput: Schema.Int,
        businessMaxOutput: Schema.Int
      }),
      Result: Reserved,
      execute: (r) =>
        sql`WITH tenant AS (
              SELECT plan,
                     CASE plan WHEN 'free' THEN ${r.freeBudget}::bigint WHEN 'pro' THEN ${r.proBudget}::bigint END AS budget,
                     ${r.promptTokens}::bigint + CASE plan WHEN 'free' THEN ${r.freeMaxOutput}::bigint
                       WHEN 'pro' THEN ${r.proMaxOutput}::bigint ELSE ${r.businessMaxOutput}::bigint END AS estimate
              FROM tenants WHERE id = ${r.tenantId}
            ),
            reserved AS (
              INSERT INTO daily_usage AS u (tenant_id, day, count, tokens, reserved)
              SELECT ${r.tenantId}, ${r.day}, 0, 0, tenant.estimate FROM tenant WHERE tenant.budget > 0
              ON CONFLICT (tenant_id, day) DO UPDATE SET reserved = u.reserved + EXCLUDED.reserved
                WHERE u.tokens + u.reserved < (SELECT budget FROM tenant)
              RETURNING u.tokens
            )
            SELECT tenant.plan, tenant.budget::float8 AS budget, tenant.estimate::float8 AS estimate,
                   EXISTS (SELECT 1 FROM reserved) AS granted,
                   COALESCE(
                     (SELECT tokens FROM reserved),
                     (SELECT tokens FROM daily_usage WHERE tenant_id = ${r.tenantId} AND day = ${r.day}),
                     0
                   )::float8 AS tokens
            FROM tenant`
    })

    return {
      ensureDay,
      history: (tenantId: TenantId, from: string, to: string) =>
        history({ tenantId, from, to }).pipe(Effect.orDie, Traced.withSpan("BillingRepo.history")),
      chargeTokens,
      reserve: (request: typeof reserve extends (r: infer R) => any ? R : never) =>
        reserve(request).pipe(Effect.orDie, Traced.withSpan("BillingRepo.reserve")),
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

const decodeTenantLinks = Schema.decodeUnknownEffect(Schema.Array(TenantLink))

/** Stripe events received, and the Stripe side of tenants. Callers run these inside one transaction. */
export class StripeWebhookRepo extends Context.Service<StripeWebhookRepo>()("agent-host/StripeWebhookRepo", {
  make: Effect.gen(function* () {
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
              FROM tenants WHERE stripe_customer_id = ${where.customer} FOR UPDATE`
      ).pipe(
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

    const applySubscription = (
      tenantId: TenantId,
      change: {
        readonly plan: Plan
        readonly customer: string
        readonly subscription: string
        readonly status: string
        readonly eventCreated: number
      }
    ) =>
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

// ---------------------------------------------------------------------------
// Per-plan quotas of what a tenant keeps
// ---------------------------------------------------------------------------

/**
 * Locks the tenant's row until the caller's transaction ends and reads its
 * plan: every check of a quota takes this lock first, so concurrent creates of
 * one tenant, on any node, count one after the other. NO KEY UPDATE leaves
 * the inserts that reference the tenant (their foreign key) free to go on.
 * Call it inside a transaction, before any other lock of that transaction.
 */
export const lockTenantPlan = (sql: SqlClient.SqlClient, tenantId: TenantId) =>
  sql<{ plan: Plan }>`SELECT plan FROM tenants WHERE id = ${tenantId} FOR NO KEY UPDATE`.pipe(
    Effect.flatMap((rows) =>
      rows[0] === undefined ? Effect.die(new Error(`No tenant ${tenantId}`)) : Effect.succeed(rows[0].plan)
    ),
    Traced.withSpan("LimitsRepo.lockTenantPlan")
  )

/**
 * Chunks of the tenant's ready documents, but `documentId`'s (whose chunks
 * are being replaced). Read after `lockTenantPlan`, in its transaction: a new
 * statement, so it sees what the previous holder of the lock committed.
 */
export const chunksOfTenant = (sql: SqlClient.SqlClient, tenantId: TenantId, documentId: string) =>
  sql<{ used: number }>`SELECT COALESCE(sum(chunk_count), 0)::float8 AS used FROM knowledge_documents
    WHERE tenant_id = ${tenantId} AND status = 'ready' AND id <> ${documentId}`.pipe(
    Effect.map((rows) => rows[0]?.used ?? 0),
    Traced.withSpan("LimitsRepo.chunksOfTenant")
  )

/** What a tenant has of each quota counted on create (one table each). */
export type CountedQuota =
  | "knowledgeBases"
  | "agents"
  | "orchestrations"
  | "teams"
  | "apiKeys"
  | "webhookEndpoints"
  | "secrets"
  | "tools"

/** A tenant's knowledge: documents, their uploaded bytes, and the chunks of the ready ones. */
export interface KnowledgeUsage {
  readonly documents: number
  readonly storedBytes: number
  readonly chunks: number
}

/** The SQL of per-plan quotas: the tenant's lock, and what it has. Callers run these inside one transaction. */
export class LimitsRepo extends Context.Service<LimitsRepo>()("agent-host/LimitsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    // Keys that are revoked or expired authenticate nothing, and take no place.
    const counts: Record<
      CountedQuota,
      (tenantId: TenantId) => Effect.Effect<ReadonlyArray<{ used: number }>, unknown>
    > = {
      knowledgeBases: (tenantId) =>
        sql`SELECT count(*)::int AS used FROM knowledge_bases WHERE tenant_id = ${tenantId}`,
      agents: (tenantId) => sql`SELECT count(*)::int AS used FROM agents WHERE tenant_id = ${tenantId}`,
      orchestrations: (tenantId) => sql`SELECT count(*)::int AS used FROM orchestrations WHERE tenant_id = ${tenantId}`,
      teams: (tenantId) => sql`SELECT count(*)::int AS used FROM teams WHERE tenant_id = ${tenantId}`,
      apiKeys: (tenantId) =>
        sql`SELECT count(*)::int AS used FROM api_keys
            WHERE tenant_id = ${tenantId} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
      webhookEndpoints: (tenantId) =>
        sql`SELECT count(*)::int AS used FROM webhook_endpoints WHERE tenant_id = ${tenantId}`,
      secrets: (tenantId) => sql`SELECT count(*)::int AS used FROM tenant_secrets WHERE tenant_id = ${tenantId}`,
      tools: (tenantId) => sql`SELECT count(*)::int AS used FROM tools WHERE tenant_id = ${tenantId}`
    }

    const count = (tenantId: TenantId, quota: CountedQuota) =>
      counts[quota](tenantId).pipe(
        Effect.map((rows) => rows[0]?.used ?? 0),
        Effect.orDie,
        Traced.withSpan("LimitsRepo.count", { attributes: { quota } })
      )

    const knowledgeUsage = (tenantId: TenantId) =>
      sql<{ documents: number; storedBytes: number; chunks: number }>`
        SELECT count(*)::int AS documents, COALESCE(sum(bytes), 0)::float8 AS stored_bytes,
               COALESCE(sum(chunk_count) FILTER (WHERE status = 'ready'), 0)::float8 AS chunks
        FROM knowledge_documents WHERE tenant_id = ${tenantId}`.pipe(
        Effect.map((rows): KnowledgeUsage => rows[0] ?? { documents: 0, storedBytes: 0, chunks: 0 }),
        Effect.orDie,
        Traced.withSpan("LimitsRepo.knowledgeUsage")
      )

    return {
      lockTenant: (tenantId: TenantId) => lockTenantPlan(sql, tenantId).pipe(Effect.orDie),
      count,
      knowledgeUsage
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
