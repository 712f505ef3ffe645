import { PgClient } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { forEachChunk } from "../Database/Chunks.ts"
import * as TenantRepo from "../Database/TenantRepo.ts"
import type { TenantId } from "../Domain/Ids.ts"
import type { DeliveryAttempt } from "./Api.ts"
import { WebhookEndpoint } from "./Endpoint.ts"
import type { Owner } from "./Webhooks.ts"

/** An event with what its delivery needs of its endpoint (null when the endpoint is gone). */
export interface DeliveryRow {
  readonly id: string
  readonly tenantId: string
  readonly ownerKind: string
  readonly ownerId: string
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

/** An attempt of the delivery log, with its key (the log's order). */
export interface AttemptRow extends DeliveryAttempt {
  readonly id: string
}

/** An endpoint's stored secrets, as the re-seal of the v1 format reads them. */
export interface SealedSecretsRow {
  readonly id: string
  readonly tenantId: string
  readonly ownerKind: string
  readonly ownerId: string
  readonly secret: string
  readonly previousSecret: string | null
}

/** Where a walk through the events due for pruning has got to. */
export interface PruneKey {
  readonly at: string
  readonly id: string
}

/** All SQL of outbound webhooks; what a client reaches is scoped by tenant and owner. */
export class WebhooksRepo extends Context.Service<WebhooksRepo>()("agent-host/WebhooksRepo", {
  make: Effect.gen(function* () {
    const sql = yield* PgClient.PgClient
    // The tenant repository makes and changes endpoints; finding and removing
    // one go by its owner, not its id, in statements of their own below.
    const endpointRows = yield* TenantRepo.make(WebhookEndpoint, {
      table: "webhook_endpoints",
      spanPrefix: "WebhooksRepo",
      expressions: {
        outputWebhookUrl: "url",
        webhookEnabled: "enabled AND disabled_reason IS NULL",
        webhookDisabledReason: "disabled_reason"
      }
    })
    const endpointCols = sql.literal(endpointRows.columns)
    const decodeEndpoints = Schema.decodeUnknownEffect(Schema.Array(WebhookEndpoint))
    const ofOwner = (tenantId: TenantId, owner: Owner) =>
      sql`tenant_id = ${tenantId} AND owner_kind = ${owner.kind} AND owner_id = ${owner.id}`

    const findEndpoint = (tenantId: TenantId, owner: Owner) =>
      sql`SELECT ${endpointCols} FROM webhook_endpoints WHERE ${ofOwner(tenantId, owner)}`.pipe(
        Effect.flatMap(decodeEndpoints),
        Effect.map((rows) => Option.fromNullishOr(rows[0])),
        Effect.orDie
      )

    const endpoints = (tenantId: TenantId, kind: Owner["kind"], ids: ReadonlyArray<string>) =>
      forEachChunk(
        ids,
        (chunk) =>
          sql`
          SELECT ${endpointCols} FROM webhook_endpoints
          WHERE tenant_id = ${tenantId} AND owner_kind = ${kind} AND owner_id IN ${sql.in(chunk)}`
      ).pipe(
        Effect.flatMap((chunks) => decodeEndpoints(chunks.flat())),
        Effect.orDie
      )

    /**
     * The owner's new endpoint, or the one another request made meanwhile
     * (then `inserted` is false). To be run under the tenant's lock
     * (Limits.admit), which every insert takes: nothing can come between
     * this look and the insert.
     */
    const insertEndpoint = (
      tenantId: TenantId,
      owner: Owner,
      input: { readonly url: string; readonly enabled: boolean; readonly secret: string }
    ) =>
      Effect.flatMap(
        findEndpoint(tenantId, owner),
        Option.match({
          onSome: (endpoint) => Effect.succeed({ endpoint, inserted: false }),
          onNone: () =>
            Effect.map(
              endpointRows.insert(tenantId, { ownerKind: owner.kind, ownerId: owner.id, ...input }),
              (endpoint) => ({ endpoint, inserted: true })
            )
        })
      )

    /** A new URL or switch (either, or both); it re-enables a disabled endpoint and forgets its failures. */
    const updateEndpoint = (
      tenantId: TenantId,
      id: string,
      change: { readonly url: string | null; readonly enabled: boolean | null }
    ) =>
      endpointRows.update(tenantId, id, {
        ...(change.url === null ? {} : { url: change.url }),
        ...(change.enabled === null ? {} : { enabled: change.enabled }),
        disabledReason: null,
        disabledAt: null,
        failingSince: null
      })

    const removeEndpoint = (tenantId: TenantId, owner: Owner) =>
      sql`DELETE FROM webhook_endpoints WHERE ${ofOwner(tenantId, owner)}`.pipe(Effect.asVoid, Effect.orDie)

    /** The new secret signs from now on; the current one goes on signing for `overlapMs`. */
    const rotate = (tenantId: TenantId, owner: Owner, secret: string, overlapMs: number) =>
      sql<{ previousExpiresAt: Date }>`UPDATE webhook_endpoints SET
          previous_secret = secret, secret = ${secret},
          previous_expires_at = now() + make_interval(secs => ${overlapMs / 1000}),
          updated_at = now()
        WHERE ${ofOwner(tenantId, owner)}
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
      sql<DeliveryRow>`SELECT e.id, e.tenant_id, w.owner_kind, w.owner_id, e.endpoint_id, e.type, e.body, e.status, e.redelivery,
               w.url, w.enabled, w.disabled_reason, w.secret,
               CASE WHEN w.previous_expires_at > now() THEN w.previous_secret END AS previous_secret
        FROM webhook_events e JOIN webhook_endpoints w ON w.id = e.endpoint_id
        WHERE e.id = ${eventId}`.pipe(Effect.map((rows) => Option.fromNullishOr(rows[0])))

    const redeliveryOf = (eventId: string) =>
      sql<{
        redelivery: number
      }>`SELECT redelivery FROM webhook_events WHERE id = ${eventId} AND status = 'pending'`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullishOr(rows[0]), (row) => row.redelivery))
      )

    const markStarted = (eventId: string, redelivery: number) =>
      sql`UPDATE webhook_events SET started = true WHERE id = ${eventId} AND redelivery = ${redelivery}`.pipe(
        Effect.asVoid
      )

    /**
     * Logs an attempt. An attempt run again (its node was lost before its
     * outcome was stored) is logged again: the receiver may have had both.
     */
    const recordAttempt = (attempt: Omit<DeliveryAttempt, "type" | "subjectId"> & { readonly endpointId: string }) =>
      sql`INSERT INTO webhook_attempts (event_id, endpoint_id, redelivery, attempt, at, url, http_status, error, duration_ms, response)
        VALUES (${attempt.eventId}, ${attempt.endpointId}, ${attempt.redelivery}, ${attempt.attempt}, ${attempt.at}, ${attempt.url},
                ${attempt.httpStatus}, ${attempt.error}, ${attempt.durationMs}, ${attempt.response})`.pipe(
        Effect.asVoid
      )

    /** The event reached its endpoint: it is delivered and the endpoint is no longer failing. */
    const delivered = (eventId: string, redelivery: number, endpointId: string) =>
      Effect.gen(function* () {
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

    /**
     * Sends an event of this owner again, if the event has had fewer than
     * `maxRedeliveries` redeliveries and the tenant's bucket of redeliveries
     * (at most `capacity`, draining at `perSecond`) has room: the next
     * redelivery number, pending, with a schedule of its own, and the id of
     * its delivery workflow (`entityIdOf`) stored with it, in one
     * transaction. The event's row lock makes concurrent redeliveries of it
     * count exactly, and the bucket's row lock those of the tenant, from any
     * number of nodes; a refused redelivery does not fill the bucket.
     */
    const redeliver = (
      tenantId: TenantId,
      owner: Owner,
      eventId: string,
      limits: { readonly maxRedeliveries: number; readonly capacity: number; readonly perSecond: number },
      entityIdOf: (redelivery: number) => Effect.Effect<string>
    ) =>
      Effect.gen(function* () {
        const drained = sql`GREATEST(0, b.level - EXTRACT(EPOCH FROM now() - b.updated_at)::float8 * ${limits.perSecond})`
        const rows = yield* sql<{
          previous: number
          level: number | null
          refused: boolean | null
          redelivery: number | null
        }>`
          WITH event AS (
            SELECT e.id, e.redelivery FROM webhook_events e JOIN webhook_endpoints w ON w.id = e.endpoint_id
            WHERE e.id = ${eventId} AND w.tenant_id = ${tenantId} AND w.owner_kind = ${owner.kind} AND w.owner_id = ${owner.id}
            FOR UPDATE OF e
          ), bucket AS (
            INSERT INTO webhook_redelivery_buckets AS b (tenant_id, level, refused, updated_at)
            SELECT ${tenantId}, 1, false, now() FROM event WHERE event.redelivery < ${limits.maxRedeliveries}
            ON CONFLICT (tenant_id) DO UPDATE SET
              level = CASE WHEN ${drained} + 1 <= ${limits.capacity} THEN ${drained} + 1 ELSE ${drained} END,
              refused = ${drained} + 1 > ${limits.capacity},
              updated_at = now()
            RETURNING level, refused
          ), bumped AS (
            UPDATE webhook_events e SET redelivery = e.redelivery + 1, status = 'pending', started = false,
                outcome = NULL, messages_pruned = false, updated_at = now()
            FROM event, bucket
            WHERE e.id = event.id AND NOT bucket.refused
            RETURNING e.redelivery
          )
          SELECT event.redelivery AS previous, bucket.level, bucket.refused, bumped.redelivery
          FROM event LEFT JOIN bucket ON true LEFT JOIN bumped ON true`
        const row = rows[0]
        if (row === undefined) return { _tag: "NotFound" } as const
        if (row.redelivery === null) {
          return row.refused === true
            ? ({ _tag: "RateLimited", level: row.level ?? limits.capacity } as const)
            : ({ _tag: "LimitReached", redeliveries: row.previous } as const)
        }
        const entityId = yield* entityIdOf(row.redelivery)
        yield* sql`INSERT INTO webhook_redeliveries (event_id, redelivery, entity_id)
                   VALUES (${eventId}, ${row.redelivery}, ${entityId}) ON CONFLICT DO NOTHING`
        return { _tag: "Redelivered", redelivery: row.redelivery } as const
      }).pipe(sql.withTransaction, Effect.orDie)

    /** Redelivery buckets untouched for `seconds` have drained: forget them. */
    const forgetIdleBuckets = (seconds: number) =>
      sql`DELETE FROM webhook_redelivery_buckets WHERE updated_at < now() - make_interval(secs => ${seconds})`.pipe(
        Effect.asVoid
      )

    /** The owner's attempts, newest first, after the `before` attempt id. */
    const attempts = (tenantId: TenantId, owner: Owner, before: string | null, limit: number) =>
      Effect.gen(function* () {
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

    /**
     * Finished events whose deliveries' cluster messages are older than
     * `seconds` and still stored, oldest first, after `after` (the key of the
     * last one read: a walk that steps over events it could not prune).
     */
    const unpruned = (seconds: number, limit: number, after: PruneKey | null) =>
      sql<{ id: string; at: string }>`SELECT id, updated_at::text AS at FROM webhook_events
        WHERE NOT messages_pruned AND status <> 'pending' AND updated_at < now() - make_interval(secs => ${seconds})
          ${after === null ? sql`` : sql`AND (updated_at, id) > (${after.at}::timestamptz, ${after.id})`}
        ORDER BY updated_at, id LIMIT ${limit}`

    /**
     * Up to `limit` stored redeliveries of these events (at most 1,000 ids),
     * of the finished ones only: a redelivery made meanwhile is pending and
     * its workflow's messages stay.
     */
    const storedRedeliveries = (eventIds: ReadonlyArray<string>, limit: number) =>
      sql<{ eventId: string; entityId: string }>`SELECT d.event_id, d.entity_id
        FROM webhook_redeliveries d JOIN webhook_events e ON e.id = d.event_id
        WHERE d.event_id IN ${sql.in(eventIds)} AND e.status <> 'pending'
        LIMIT ${limit}`

    /** Forgets stored redeliveries whose messages are pruned (at most 1,000 of each); returns how many. */
    const forgetRedeliveries = (eventIds: ReadonlyArray<string>, entityIds: ReadonlyArray<string>) =>
      sql<{ n: number }>`WITH gone AS (
          DELETE FROM webhook_redeliveries WHERE event_id IN ${sql.in(eventIds)} AND entity_id IN ${sql.in(entityIds)} RETURNING 1)
        SELECT count(*)::int AS n FROM gone`.pipe(Effect.map((rows) => rows[0]?.n ?? 0))

    /**
     * Marks these events (at most 1,000) pruned, those still finished and
     * without a stored redelivery left (one made meanwhile is pruned later).
     */
    const markPruned = (eventIds: ReadonlyArray<string>) =>
      sql`UPDATE webhook_events e SET messages_pruned = true
        WHERE e.id IN ${sql.in(eventIds)} AND e.status <> 'pending'
          AND NOT EXISTS (SELECT 1 FROM webhook_redeliveries d WHERE d.event_id = e.id)`.pipe(Effect.asVoid)

    /** Whether every stored secret has been re-sealed in the v2 format (and v1 is refused). */
    const secretsUpgraded = sql<{ done: boolean }>`
      SELECT EXISTS (SELECT 1 FROM webhook_secret_upgrades WHERE version = 'v2') AS done`.pipe(
      Effect.map((rows) => rows[0]?.done === true)
    )

    /** Up to `limit` endpoints after `after` (by id) holding a v1 value. */
    const legacySecrets = (after: string, limit: number) =>
      sql<SealedSecretsRow>`SELECT id, tenant_id, owner_kind, owner_id, secret, previous_secret FROM webhook_endpoints
        WHERE id > ${after} AND (secret LIKE 'v1.%' OR previous_secret LIKE 'v1.%')
        ORDER BY id LIMIT ${limit}`

    /** Writes re-sealed secrets into the row if it still holds what was read; whether it did. */
    const resealSecrets = (
      read: SealedSecretsRow,
      sealed: { readonly secret: string; readonly previousSecret: string | null }
    ) =>
      sql<{
        id: string
      }>`UPDATE webhook_endpoints SET secret = ${sealed.secret}, previous_secret = ${sealed.previousSecret}
        WHERE id = ${read.id} AND secret = ${read.secret} AND previous_secret IS NOT DISTINCT FROM ${read.previousSecret}
        RETURNING id`.pipe(Effect.map((rows) => rows.length > 0))

    const markSecretsUpgraded =
      sql`INSERT INTO webhook_secret_upgrades (version) VALUES ('v2') ON CONFLICT DO NOTHING`.pipe(Effect.asVoid)

    return {
      secretsUpgraded,
      legacySecrets,
      resealSecrets,
      markSecretsUpgraded,
      unpruned,
      storedRedeliveries,
      forgetRedeliveries,
      markPruned,
      forgetIdleBuckets,
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
