import { PgClient } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { TenantId } from "../Domain/Ids.ts"
import type { Owner } from "./Webhooks.ts"

export interface EndpointRow {
  readonly id: string
  readonly ownerId: string
  readonly url: string
  readonly enabled: boolean
  readonly disabledReason: string | null
}

/** An event with what its delivery needs of its endpoint (null when the endpoint is gone). */
export interface DeliveryRow {
  readonly id: string
  readonly tenantId: string
  readonly endpointId: string
  readonly type: string
  readonly body: string
  readonly status: "pending" | "delivered" | "failed"
  readonly redelivery: number
  readonly url: string
  readonly enabled: boolean
  readonly disabledReason: string | null
  readonly secret: string
  /** The previous secret while its overlap lasts, else null. */
  readonly previousSecret: string | null
}

export interface AttemptRow {
  readonly id: string
  readonly eventId: string
  readonly type: string
  readonly subjectId: string
  readonly attempt: number
  readonly redelivery: number
  readonly at: Date
  readonly url: string
  readonly httpStatus: number | null
  readonly error: string | null
  readonly durationMs: number
  readonly response: string | null
}

/** All SQL of outbound webhooks; what a client reaches is scoped by tenant and owner. */
export class WebhooksRepo extends Context.Service<WebhooksRepo>()("agent-host/WebhooksRepo", {
  make: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const endpointCols = sql.literal("id, owner_id, url, enabled, disabled_reason")

    const findEndpoint = (tenantId: TenantId, owner: Owner) =>
      sql<EndpointRow>`SELECT ${endpointCols} FROM webhook_endpoints
        WHERE tenant_id = ${tenantId} AND owner_kind = ${owner.kind} AND owner_id = ${owner.id}`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0])),
        Effect.orDie
      )

    const endpoints = (tenantId: TenantId, kind: Owner["kind"], ids: ReadonlyArray<string>) =>
      ids.length === 0 ? Effect.succeed([] as ReadonlyArray<EndpointRow>) : sql<EndpointRow>`
        SELECT ${endpointCols} FROM webhook_endpoints
        WHERE tenant_id = ${tenantId} AND owner_kind = ${kind} AND owner_id IN ${sql.in(ids)}`.pipe(Effect.orDie)

    const insertEndpoint = (input: {
      readonly id: string
      readonly tenantId: TenantId
      readonly owner: Owner
      readonly url: string
      readonly enabled: boolean
      readonly secret: string
    }) =>
      sql<EndpointRow>`INSERT INTO webhook_endpoints (id, tenant_id, owner_kind, owner_id, url, enabled, secret)
        VALUES (${input.id}, ${input.tenantId}, ${input.owner.kind}, ${input.owner.id}, ${input.url}, ${input.enabled}, ${input.secret})
        ON CONFLICT (tenant_id, owner_kind, owner_id) DO NOTHING
        RETURNING ${endpointCols}`.pipe(Effect.map((rows) => Option.fromNullishOr(rows[0])), Effect.orDie)

    /** A new URL or switch; either re-enables a disabled endpoint and forgets its failures. */
    const updateEndpoint = (tenantId: TenantId, owner: Owner, change: { readonly url: string | null; readonly enabled: boolean | null }) =>
      sql<EndpointRow>`UPDATE webhook_endpoints SET
          url = COALESCE(${change.url}, url),
          enabled = COALESCE(${change.enabled}, enabled),
          disabled_reason = NULL, disabled_at = NULL, failing_since = NULL,
          updated_at = now()
        WHERE tenant_id = ${tenantId} AND owner_kind = ${owner.kind} AND owner_id = ${owner.id}
        RETURNING ${endpointCols}`.pipe(Effect.map((rows) => Option.fromNullishOr(rows[0])), Effect.orDie)

    const removeEndpoint = (tenantId: TenantId, owner: Owner) =>
      sql`DELETE FROM webhook_endpoints
        WHERE tenant_id = ${tenantId} AND owner_kind = ${owner.kind} AND owner_id = ${owner.id}`.pipe(Effect.asVoid, Effect.orDie)

    /** The new secret signs from now on; the current one goes on signing for `overlapMs`. */
    const rotate = (tenantId: TenantId, owner: Owner, secret: string, overlapMs: number) =>
      sql<{ previousExpiresAt: Date }>`UPDATE webhook_endpoints SET
          previous_secret = secret, secret = ${secret},
          previous_expires_at = now() + make_interval(secs => ${overlapMs / 1000}),
          updated_at = now()
        WHERE tenant_id = ${tenantId} AND owner_kind = ${owner.kind} AND owner_id = ${owner.id}
        RETURNING previous_expires_at`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullishOr(rows[0]), (row) => new Date(row.previousExpiresAt))),
        Effect.orDie
      )

    /**
     * Writes an event when the owner has an enabled webhook, in one statement
     * (the caller's transaction, if any, carries it); returns its id or null.
     */
    const enqueue = (input: {
      readonly id: string
      readonly tenantId: TenantId
      readonly owner: Owner
      readonly subjectId: string
      readonly type: string
      readonly body: string
    }) =>
      sql<{ id: string }>`INSERT INTO webhook_events (id, tenant_id, endpoint_id, subject_id, type, body)
        SELECT ${input.id}, tenant_id, id, ${input.subjectId}, ${input.type}, ${input.body}
        FROM webhook_endpoints
        WHERE tenant_id = ${input.tenantId} AND owner_kind = ${input.owner.kind} AND owner_id = ${input.owner.id}
          AND enabled AND disabled_reason IS NULL
        RETURNING id`.pipe(Effect.map((rows) => rows[0]?.id ?? null))

    const forDelivery = (eventId: string) =>
      sql<DeliveryRow>`SELECT e.id, e.tenant_id, e.endpoint_id, e.type, e.body, e.status, e.redelivery,
               w.url, w.enabled, w.disabled_reason, w.secret,
               CASE WHEN w.previous_expires_at > now() THEN w.previous_secret END AS previous_secret
        FROM webhook_events e JOIN webhook_endpoints w ON w.id = e.endpoint_id
        WHERE e.id = ${eventId}`.pipe(Effect.map((rows) => Option.fromNullishOr(rows[0])))

    const redeliveryOf = (eventId: string) =>
      sql<{ redelivery: number }>`SELECT redelivery FROM webhook_events WHERE id = ${eventId} AND status = 'pending'`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullishOr(rows[0]), (row) => row.redelivery))
      )

    const markStarted = (eventId: string, redelivery: number) =>
      sql`UPDATE webhook_events SET started = true WHERE id = ${eventId} AND redelivery = ${redelivery}`.pipe(Effect.asVoid)

    /**
     * Logs an attempt. An attempt run again (its node was lost before its
     * outcome was stored) is logged again: the receiver may have had both.
     */
    const recordAttempt = (attempt: {
      readonly eventId: string
      readonly endpointId: string
      readonly redelivery: number
      readonly attempt: number
      readonly at: Date
      readonly url: string
      readonly httpStatus: number | null
      readonly error: string | null
      readonly durationMs: number
      readonly response: string | null
    }) =>
      sql`INSERT INTO webhook_attempts (event_id, endpoint_id, redelivery, attempt, at, url, http_status, error, duration_ms, response)
        VALUES (${attempt.eventId}, ${attempt.endpointId}, ${attempt.redelivery}, ${attempt.attempt}, ${attempt.at}, ${attempt.url},
                ${attempt.httpStatus}, ${attempt.error}, ${attempt.durationMs}, ${attempt.response})`.pipe(Effect.asVoid)

    /** The event reached its endpoint: it is delivered and the endpoint is no longer failing. */
    const delivered = (eventId: string, redelivery: number, endpointId: string) =>
      Effect.gen(function*() {
        yield* sql`UPDATE webhook_events SET status = 'delivered', outcome = NULL, updated_at = now()
                   WHERE id = ${eventId} AND redelivery = ${redelivery}`
        yield* sql`UPDATE webhook_endpoints SET failing_since = NULL WHERE id = ${endpointId} AND failing_since IS NOT NULL`
      }).pipe(sql.withTransaction)

    /** An attempt failed: since when the endpoint has failed without a success, and whether that is over `disableAfterMs`. */
    const failing = (endpointId: string, disableAfterMs: number) =>
      sql<{ expired: boolean }>`UPDATE webhook_endpoints SET failing_since = COALESCE(failing_since, now())
        WHERE id = ${endpointId}
        RETURNING failing_since <= now() - make_interval(secs => ${disableAfterMs / 1000}) AS expired`.pipe(
        Effect.map((rows) => rows[0]?.expired === true)
      )

    const disable = (endpointId: string, reason: string) =>
      sql`UPDATE webhook_endpoints SET disabled_reason = ${reason}, disabled_at = now(), updated_at = now()
        WHERE id = ${endpointId} AND disabled_reason IS NULL`.pipe(Effect.asVoid)

    /** The delivery of this redelivery ended without success. */
    const failed = (eventId: string, redelivery: number, outcome: string) =>
      sql`UPDATE webhook_events SET status = 'failed', outcome = ${outcome}, updated_at = now()
        WHERE id = ${eventId} AND redelivery = ${redelivery} AND status = 'pending'`.pipe(Effect.asVoid)

    /** Pending events whose delivery was not handed to the cluster (a crash right after commit). */
    const unstarted = (limit: number) =>
      sql<{ id: string }>`SELECT id FROM webhook_events
        WHERE status = 'pending' AND NOT started AND created_at < now() - interval '1 second'
        ORDER BY created_at LIMIT ${limit}`.pipe(Effect.map((rows) => rows.map((row) => row.id)))

    /** Sends an event of this owner again: the next redelivery number, pending, with a schedule of its own. */
    const redeliver = (tenantId: TenantId, owner: Owner, eventId: string) =>
      sql<{ id: string }>`UPDATE webhook_events e SET redelivery = redelivery + 1, status = 'pending', started = false,
          outcome = NULL, messages_pruned = false, updated_at = now()
        FROM webhook_endpoints w
        WHERE e.id = ${eventId} AND e.endpoint_id = w.id
          AND w.tenant_id = ${tenantId} AND w.owner_kind = ${owner.kind} AND w.owner_id = ${owner.id}
        RETURNING e.id`.pipe(Effect.map((rows) => rows.length > 0), Effect.orDie)

    /** The owner's attempts, newest first, after the `before` attempt id. */
    const attempts = (tenantId: TenantId, owner: Owner, before: string | null, limit: number) =>
      Effect.gen(function*() {
        const rows = yield* sql<AttemptRow & { total: number }>`
          SELECT a.id::text AS id, a.event_id, e.type, e.subject_id, a.attempt, a.redelivery, a.at, a.url,
                 a.http_status, a.error, a.duration_ms, a.response,
                 (SELECT count(*)::int FROM webhook_attempts x WHERE x.endpoint_id = w.id) AS total
          FROM webhook_endpoints w
          JOIN webhook_attempts a ON a.endpoint_id = w.id
          JOIN webhook_events e ON e.id = a.event_id
          WHERE w.tenant_id = ${tenantId} AND w.owner_kind = ${owner.kind} AND w.owner_id = ${owner.id}
            ${before === null ? sql`` : sql`AND a.id < ${before}::bigint`}
          ORDER BY a.id DESC LIMIT ${limit}`
        if (rows.length > 0) return { rows, total: rows[0]!.total }
        const counted = yield* sql<{ total: number }>`SELECT count(*)::int AS total
          FROM webhook_attempts a JOIN webhook_endpoints w ON w.id = a.endpoint_id
          WHERE w.tenant_id = ${tenantId} AND w.owner_kind = ${owner.kind} AND w.owner_id = ${owner.id}`
        return { rows, total: counted[0]?.total ?? 0 }
      }).pipe(Effect.orDie)

    /** Finished events whose deliveries' cluster messages are older than `seconds` and still stored; oldest first. */
    const unpruned = (seconds: number, limit: number) =>
      sql<{ id: string; redelivery: number }>`SELECT id, redelivery FROM webhook_events
        WHERE NOT messages_pruned AND status <> 'pending' AND updated_at < now() - make_interval(secs => ${seconds})
        ORDER BY updated_at LIMIT ${limit}`

    /**
     * Deletes the cluster's stored messages (and their replies) of these
     * events' finished delivery workflows, given the workflows' entity ids,
     * and marks the events as pruned; in one transaction.
     */
    const pruneMessages = (ids: ReadonlyArray<string>, entityType: string, entityIds: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        yield* sql`DELETE FROM cluster_replies WHERE request_id IN (
                     SELECT id FROM cluster_messages WHERE entity_type = ${entityType} AND entity_id IN ${sql.in(entityIds)})`
        yield* sql`DELETE FROM cluster_messages WHERE entity_type = ${entityType} AND entity_id IN ${sql.in(entityIds)}`
        yield* sql`UPDATE webhook_events SET messages_pruned = true WHERE id IN ${sql.in(ids)} AND status <> 'pending'`
      }).pipe(sql.withTransaction)

    return {
      unpruned,
      pruneMessages,
      findEndpoint,
      endpoints,
      insertEndpoint,
      updateEndpoint,
      removeEndpoint,
      rotate,
      enqueue,
      forDelivery,
      redeliveryOf,
      markStarted,
      recordAttempt,
      delivered,
      failing,
      disable,
      failed,
      unstarted,
      redeliver,
      attempts
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
