import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Singleton from "effect/cluster/Singleton"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import type { SqlError } from "effect/sql/SqlError"
import * as WorkflowEngine from "effect/workflow/WorkflowEngine"
import { Limits } from "../Billing/Limits.ts"
import { AppConfig } from "../Config.ts"
import { maxIdsPerStatement } from "../Database/Chunks.ts"
import { decodeCursor, encodeCursor, type Page } from "../Domain/Cursor.ts"
import type { TenantId } from "../Domain/Ids.ts"
import {
  BadRequest,
  Conflict,
  NotFound,
  type QuotaReached,
  RedeliveryLimitReached,
  RedeliveryRateLimited
} from "../Domain/Problems.ts"
import {
  defaultDeliveryPageSize,
  type DeliveryAttempt,
  isAttemptKey,
  type SigningSecret,
  type WebhookState
} from "./Api.ts"
import { DeliveryWorkflow } from "./Delivery.ts"
import type { OwnerKind, WebhookEndpoint } from "./Endpoint.ts"
import * as Guard from "./Guard.ts"
import { type PruneKey, WebhooksRepo } from "./Repo.ts"
import { newEventId, newSecret, SecretBox } from "./Signing.ts"
import * as ClusterStorage from "../Runtime/ClusterStorage.ts"
import * as Traced from "../Observability/Traced.ts"

/** What sends events: a team (its room) or an orchestration (its executions). */
export interface Owner {
  readonly kind: typeof OwnerKind.Type
  readonly id: string
}

export interface WebhooksShape {
  /**
   * Sets an owner's webhook URL (null removes it) and/or turns it on or off.
   * The URL is checked (http(s), a host, no private address unless
   * WEBHOOK_ALLOW_PRIVATE); a refusal is a 400 whose path is `field`.
   * `signingSecret` is set only when this call made a new secret (a URL set
   * where there was none): the one time it is shown. A first URL past the
   * plan's MAX_WEBHOOK_ENDPOINTS is a 429.
   */
  readonly configure: (
    tenantId: TenantId,
    owner: Owner,
    change: { readonly url?: string | null | undefined; readonly enabled?: boolean | undefined },
    field: ReadonlyArray<string>
  ) => Effect.Effect<{ readonly state: WebhookState; readonly signingSecret: string | null }, BadRequest | QuotaReached>
  /** The owner's webhook as its resource shows it (no webhook: null URL, disabled). */
  readonly state: (tenantId: TenantId, owner: Owner) => Effect.Effect<WebhookState>
  /** The same for many owners of one kind at once (lists), keyed by owner id. */
  readonly states: (
    tenantId: TenantId,
    kind: Owner["kind"],
    ids: ReadonlyArray<string>
  ) => Effect.Effect<ReadonlyMap<string, WebhookState>>
  /** A new secret; the previous one still signs for WEBHOOK_ROTATION_OVERLAP. 409 without a webhook. */
  readonly rotateSecret: (tenantId: TenantId, owner: Owner) => Effect.Effect<SigningSecret, Conflict>
  /** Forgets the owner's webhook, its events and its log (the owner is deleted). */
  readonly remove: (tenantId: TenantId, owner: Owner) => Effect.Effect<void>
  /**
   * Writes an event to the outbox, to be called inside the caller's
   * transaction with the final state it reports, so that neither is ever
   * stored without the other. Nothing is written when the owner has no
   * enabled webhook. Returns the event id, for `deliver` once committed.
   */
  readonly enqueue: (event: {
    readonly tenantId: TenantId
    readonly owner: Owner
    readonly subjectId: string
    readonly type: string
    readonly data: unknown
  }) => Effect.Effect<string | null, SqlError>
  /** Starts delivering a committed event now (idempotent; the outbox sweep catches what this misses). */
  readonly deliver: (eventId: string) => Effect.Effect<void>
  /** Every attempt to deliver the owner's events, newest first. */
  readonly deliveries: (
    tenantId: TenantId,
    owner: Owner,
    query: { readonly limit?: number | undefined; readonly cursor?: string | undefined }
  ) => Effect.Effect<Page<DeliveryAttempt>, BadRequest>
  /**
   * Sends an event again: same id, new timestamp and signature, a fresh retry
   * schedule. At most WEBHOOK_MAX_REDELIVERIES times per event (then 409) and
   * WEBHOOK_REDELIVERIES_PER_TENANT per WEBHOOK_REDELIVERY_WINDOW per tenant
   * (then 429 with Retry-After).
   */
  readonly redeliver: (
    tenantId: TenantId,
    owner: Owner,
    eventId: string
  ) => Effect.Effect<
    {
      readonly eventId: string
      readonly status: "pending"
    },
    NotFound | RedeliveryLimitReached | RedeliveryRateLimited
  >
}

/** Retry-After on whatever response the current request gets (nothing outside a request). */
const retryAfterHeader = (seconds: number) =>
  Effect.withFiber((fiber) => {
    HttpEffect.appendPreResponseHandlerUnsafe(fiber.context, (_request, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(seconds)))
    )
    return Effect.void
  })

/**
 * Hands the delivery of the event's current redelivery to the cluster (which
 * stores the start before this returns), then marks the event handed over.
 */
const startDelivery = (eventId: string) =>
  Effect.gen(function* () {
    const repo = yield* WebhooksRepo
    const redelivery = yield* repo.redeliveryOf(eventId)
    if (Option.isNone(redelivery)) return
    yield* DeliveryWorkflow.execute({ eventId, redelivery: redelivery.value }, { discard: true })
    yield* repo.markStarted(eventId, redelivery.value)
  })

/**
 * Outbound webhooks: one mechanism for every feature that sends events
 * (the outbox, Standard Webhooks signing, delivery by the cluster with
 * retries, the delivery log, redelivery and the SSRF guard).
 */
export class Webhooks extends Context.Service<Webhooks, WebhooksShape>()("agent-host/Webhooks") {
  static readonly make = Effect.gen(function* () {
    const repo = yield* WebhooksRepo
    const box = yield* SecretBox
    const config = yield* AppConfig
    const engine = yield* WorkflowEngine.WorkflowEngine
    const limits = yield* Limits
    const guard = yield* Guard.EgressGuard

    const noWebhook: WebhookState = { outputWebhookUrl: null, webhookEnabled: false, webhookDisabledReason: null }
    const stateOf = (endpoint: WebhookEndpoint): WebhookState => ({
      outputWebhookUrl: endpoint.outputWebhookUrl,
      webhookEnabled: endpoint.webhookEnabled,
      webhookDisabledReason: endpoint.webhookDisabledReason
    })

    const refused = (field: ReadonlyArray<string>, message: string) =>
      new BadRequest({ detail: `${field.join(".")}: ${message}`, errors: [{ path: [...field], message }] })

    /** The URL, normalised, if it may be a webhook's: its scheme, host and every address it resolves to. */
    const checkUrl = (raw: string, field: ReadonlyArray<string>) =>
      Effect.gen(function* () {
        const url = Guard.parseUrl(raw.trim())
        if (Result.isFailure(url)) return yield* refused(field, url.failure)
        yield* guard.check(url.success).pipe(Effect.mapError((why) => refused(field, why)))
        return url.success.toString()
      })

    const configure: WebhooksShape["configure"] = Traced.fn("Webhooks.configure")(
      function* (tenantId, owner, change, field) {
        if (change.url === null) {
          yield* repo.removeEndpoint(tenantId, owner)
          return { state: noWebhook, signingSecret: null }
        }
        const url = change.url === undefined ? null : yield* checkUrl(change.url, field)
        const found = yield* repo.findEndpoint(tenantId, owner)
        let endpoint: WebhookEndpoint
        if (Option.isSome(found)) endpoint = found.value
        else {
          if (url === null) return { state: noWebhook, signingSecret: null }
          const secret = newSecret()
          const made = yield* limits.admit(
            tenantId,
            "webhookEndpoints",
            repo.insertEndpoint(tenantId, owner, {
              url,
              enabled: change.enabled ?? true,
              secret: box.seal(secret, { tenantId, ...owner })
            })
          )
          if (made.inserted) return { state: stateOf(made.endpoint), signingSecret: secret }
          // Another request set it at the same moment: this one changes it, with the secret already made.
          endpoint = made.endpoint
        }
        if (url === null && change.enabled === undefined) return { state: stateOf(endpoint), signingSecret: null }
        const updated = yield* repo.updateEndpoint(tenantId, endpoint.id, { url, enabled: change.enabled ?? null })
        return { state: Option.match(updated, { onNone: () => noWebhook, onSome: stateOf }), signingSecret: null }
      }
    )

    const state: WebhooksShape["state"] = (tenantId, owner) =>
      Effect.map(repo.findEndpoint(tenantId, owner), Option.match({ onNone: () => noWebhook, onSome: stateOf }))

    const states: WebhooksShape["states"] = (tenantId, kind, ids) =>
      Effect.map(repo.endpoints(tenantId, kind, ids), (rows) => {
        const byOwner = new Map(rows.map((row) => [row.ownerId, stateOf(row)] as const))
        return new Map(ids.map((id) => [id, byOwner.get(id) ?? noWebhook] as const))
      })

    const rotateSecret: WebhooksShape["rotateSecret"] = Traced.fn("Webhooks.rotateSecret")(function* (tenantId, owner) {
      const secret = newSecret()
      const expires = yield* repo.rotate(
        tenantId,
        owner,
        box.seal(secret, { tenantId, ...owner }),
        Duration.toMillis(config.webhookRotationOverlap)
      )
      if (Option.isNone(expires)) return yield* new Conflict({ detail: "There is no webhook URL to sign for" })
      return { signingSecret: secret, previousSecretExpiresAt: expires.value }
    })

    const remove: WebhooksShape["remove"] = (tenantId, owner) => repo.removeEndpoint(tenantId, owner)

    const enqueue: WebhooksShape["enqueue"] = (event) =>
      Effect.suspend(() => {
        const body = JSON.stringify({ type: event.type, timestamp: new Date().toISOString(), data: event.data })
        return repo.enqueue({
          id: newEventId(),
          tenantId: event.tenantId,
          owner: event.owner,
          subjectId: event.subjectId,
          type: event.type,
          body
        })
      }).pipe(Traced.withSpan("Webhooks.enqueue"))

    const start = (eventId: string) =>
      startDelivery(eventId).pipe(
        Effect.provideService(WebhooksRepo, repo),
        Effect.provideService(WorkflowEngine.WorkflowEngine, engine)
      )

    const deliver: WebhooksShape["deliver"] = (eventId) =>
      start(eventId).pipe(
        Effect.timeoutOrElse({
          duration: config.clusterCallTimeout,
          orElse: () => Effect.logWarning("A webhook delivery was not taken in time; the sweep will start it")
        }),
        Effect.catchCause((cause) =>
          Effect.logWarning("A webhook delivery could not start; the sweep will start it", cause).pipe(
            Effect.annotateLogs({ eventId })
          )
        ),
        Traced.withSpan("Webhooks.deliver")
      )

    const deliveries: WebhooksShape["deliveries"] = Traced.fn("Webhooks.deliveries")(
      function* (tenantId, owner, query) {
        const before = yield* decodeCursor(query.cursor, isAttemptKey)
        const limit = query.limit ?? defaultDeliveryPageSize
        const { rows, total } = yield* repo.attempts(tenantId, owner, before, limit + 1)
        const data = rows.slice(0, limit).map(
          (row): DeliveryAttempt => ({
            eventId: row.eventId,
            type: row.type,
            subjectId: row.subjectId,
            attempt: row.attempt,
            redelivery: row.redelivery,
            at: new Date(row.at),
            url: row.url,
            httpStatus: row.httpStatus,
            error: row.error,
            durationMs: row.durationMs,
            response: row.response
          })
        )
        return { data, total, nextCursor: rows.length > limit ? encodeCursor(rows[limit - 1]!.id) : null }
      }
    )

    const redeliveryWindowSeconds = Math.max(1, Duration.toSeconds(config.webhookRedeliveryWindow))
    const redeliveryLimits = {
      maxRedeliveries: config.webhookMaxRedeliveries,
      capacity: config.webhookRedeliveriesPerTenant,
      perSecond: config.webhookRedeliveriesPerTenant / redeliveryWindowSeconds
    }
    const entityIdOf = (eventId: string) => (redelivery: number) =>
      DeliveryWorkflow.executionId({ eventId, redelivery })

    const redeliver: WebhooksShape["redeliver"] = Traced.fn("Webhooks.redeliver")(function* (tenantId, owner, eventId) {
      if (eventId.length > 64) return yield* new NotFound({ detail: `No event ${eventId}` })
      const outcome = yield* repo.redeliver(tenantId, owner, eventId, redeliveryLimits, entityIdOf(eventId))
      switch (outcome._tag) {
        case "NotFound":
          return yield* new NotFound({ detail: `No event ${eventId}` })
        case "LimitReached":
          return yield* new RedeliveryLimitReached({
            detail: `Event ${eventId} was redelivered ${outcome.redeliveries} times, the most WEBHOOK_MAX_REDELIVERIES allows`,
            setting: "WEBHOOK_MAX_REDELIVERIES",
            limit: config.webhookMaxRedeliveries
          })
        case "RateLimited": {
          // Time until one more redelivery fits in the bucket.
          const retryAfter = Math.max(
            1,
            Math.ceil((outcome.level + 1 - redeliveryLimits.capacity) / redeliveryLimits.perSecond)
          )
          yield* retryAfterHeader(retryAfter)
          return yield* new RedeliveryRateLimited({
            detail:
              `Too many redeliveries: at most ${redeliveryLimits.capacity} per ${Duration.format(config.webhookRedeliveryWindow)} ` +
              `(WEBHOOK_REDELIVERIES_PER_TENANT); try again in ${retryAfter} s`,
            setting: "WEBHOOK_REDELIVERIES_PER_TENANT",
            limit: redeliveryLimits.capacity,
            windowSeconds: Math.round(redeliveryWindowSeconds),
            retryAfter
          })
        }
        case "Redelivered":
          yield* Effect.forkDetach(deliver(eventId))
          return { eventId, status: "pending" as const }
      }
    })

    return Webhooks.of({ configure, state, states, rotateSecret, remove, enqueue, deliver, deliveries, redeliver })
  })

  static readonly layer = Layer.effect(Webhooks, Webhooks.make).pipe(
    Layer.provide([WebhooksRepo.layer, SecretBox.layer, Limits.layer, Guard.EgressGuard.layer])
  )

  /**
   * Every 3 s, the events committed but not handed to the cluster (a crash
   * between the commit and the start) are; every 10 s, the cluster's stored
   * messages of deliveries finished over WEBHOOK_MESSAGES_RETENTION ago are
   * deleted (the events and the log keep what clients see), and drained
   * redelivery buckets forgotten. A cluster singleton: one node sweeps, and
   * another takes over if it stops.
   */
  static readonly sweeper = Singleton.make(
    "WebhooksSweep",
    Effect.gen(function* () {
      const repo = yield* WebhooksRepo
      const config = yield* AppConfig
      // Idempotent: a delivery already under way is keyed by the same event and redelivery.
      const sweep = Effect.gen(function* () {
        const ids = yield* repo.unstarted(500)
        yield* Effect.forEach(ids, (eventId) => Effect.ignore(startDelivery(eventId)), {
          discard: true,
          concurrency: 10
        })
      })
      const tables = yield* ClusterStorage.ClusterTables
      const batchSize = 200

      /**
       * Deletes the cluster's messages of these events' delivery workflows
       * and marks the events pruned. The first delivery's workflow id follows
       * from the event's id; each redelivery's was stored when it was made, so
       * nothing depends on how many redeliveries an event had.
       */
      const pruneEvents = (eventIds: ReadonlyArray<string>) =>
        Effect.gen(function* () {
          const firsts = yield* Effect.forEach(eventIds, (eventId) =>
            DeliveryWorkflow.executionId({ eventId, redelivery: 0 })
          )
          yield* tables.deleteMessages(DeliveryWorkflow, firsts)
          while (true) {
            const stored = yield* repo.storedRedeliveries(eventIds, maxIdsPerStatement)
            if (stored.length === 0) break
            const entityIds = stored.map((row) => row.entityId)
            yield* tables.deleteMessages(DeliveryWorkflow, entityIds)
            // Rows that could not be forgotten would be read again: stop.
            if ((yield* repo.forgetRedeliveries(eventIds, entityIds)) === 0) break
          }
          yield* repo.markPruned(eventIds)
        })

      // A batch that fails is pruned again an event at a time; an event that
      // still fails is logged and stepped over until the next prune, so one
      // event can never hold back the others.
      const pruneBatch = (eventIds: ReadonlyArray<string>) =>
        pruneEvents(eventIds).pipe(
          Effect.catchCause((cause) =>
            Effect.logWarning("A webhook message prune batch failed; pruning its events one by one", cause).pipe(
              Effect.andThen(
                Effect.forEach(
                  eventIds,
                  (eventId) =>
                    pruneEvents([eventId]).pipe(
                      Effect.catchCause((cause) =>
                        Effect.logWarning(
                          "Webhook message prune of an event failed; skipped until the next prune",
                          cause
                        ).pipe(Effect.annotateLogs({ eventId }))
                      )
                    ),
                  { discard: true }
                )
              )
            )
          )
        )

      const prune = Effect.gen(function* () {
        const seconds = Duration.toSeconds(config.webhookMessagesRetention)
        let after: PruneKey | null = null
        for (let batch = 0; batch < 20; batch++) {
          const events: ReadonlyArray<{ readonly id: string; readonly at: string }> = yield* repo.unpruned(
            seconds,
            batchSize,
            after
          )
          if (events.length === 0) break
          const last = events[events.length - 1]!
          after = { at: last.at, id: last.id }
          yield* pruneBatch(events.map((event) => event.id))
          if (events.length < batchSize) break
        }
      })
      // Buckets idle for a whole window have drained.
      const forgetBuckets = repo
        .forgetIdleBuckets(Math.max(1, Duration.toSeconds(config.webhookRedeliveryWindow)))
        .pipe(
          Effect.catchCause((cause) => Effect.logWarning("Forgetting idle webhook redelivery buckets failed", cause))
        )
      yield* prune.pipe(
        Effect.catchCause((cause) => Effect.logWarning("Webhook message prune failed", cause)),
        Effect.andThen(forgetBuckets),
        Effect.repeat(Schedule.spaced("10 seconds")),
        Effect.forkScoped
      )
      yield* sweep.pipe(
        Effect.catchCause((cause) => Effect.logWarning("Webhook sweep failed", cause)),
        Effect.repeat(Schedule.spaced("3 seconds"))
      )
    })
  ).pipe(Layer.provide(WebhooksRepo.layer))
}
