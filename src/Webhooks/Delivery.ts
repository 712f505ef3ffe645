import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Activity from "effect/workflow/Activity"
import * as DurableClock from "effect/workflow/DurableClock"
import * as Workflow from "effect/workflow/Workflow"
import { AppConfig } from "../Config.ts"
import { retryTransient } from "../Database/Errors.ts"
import { storable } from "../Domain/Text.ts"
import * as Guard from "./Guard.ts"
import { WebhooksRepo } from "./Repo.ts"
import { SecretBox, sign } from "./Signing.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * One delivery of one event is one durable workflow of effect's cluster,
 * keyed by the event and its redelivery number, so exactly one node delivers
 * it and a lost node's delivery is taken over. Each attempt is an activity
 * (its outcome stored once it is made); between attempts the workflow sleeps
 * on the durable clock, per WEBHOOK_RETRY_SCHEDULE.
 */
export const DeliveryWorkflow = Workflow.make("WebhookDelivery", {
  payload: { eventId: Schema.String, redelivery: Schema.Int },
  idempotencyKey: ({ eventId, redelivery }) => `${eventId}:${redelivery}`
})

const Outcome = Schema.Literals(["delivered", "retry", "stop"])
type Outcome = typeof Outcome.Type

export const userAgent = "agent-host-webhooks/1.0"
const maxResponseBytes = 1024

const attemptOnce = Traced.fn("Webhooks.attempt")(function* (eventId: string, redelivery: number, attempt: number) {
  const repo = yield* WebhooksRepo
  const box = yield* SecretBox
  const config = yield* AppConfig
  const guard = yield* Guard.EgressGuard
  const found = yield* retryTransient(repo.forDelivery(eventId))
  if (Option.isNone(found)) return "stop" as const
  const event = found.value
  // Another redelivery of the event has begun, or this one is over.
  if (event.redelivery !== redelivery || event.status !== "pending") return "stop" as const
  if (!event.enabled || event.disabledReason !== null) {
    yield* retryTransient(
      repo.failed(
        eventId,
        redelivery,
        `Not sent: the webhook is ${event.disabledReason !== null ? `disabled (${event.disabledReason})` : "turned off"}`
      )
    )
    return "stop" as const
  }
  const started = yield* Clock.currentTimeMillis
  const record = (result: { httpStatus: number | null; error: string | null; response: string | null }) =>
    Effect.gen(function* () {
      const durationMs = Math.max(0, Math.round((yield* Clock.currentTimeMillis) - started))
      yield* retryTransient(
        repo.recordAttempt({
          eventId,
          endpointId: event.endpointId,
          redelivery,
          attempt,
          at: new Date(started),
          url: event.url,
          httpStatus: result.httpStatus,
          error: result.error === null ? null : storable(result.error),
          durationMs,
          response: result.response === null ? null : storable(result.response)
        })
      )
    })

  const failure = (result: { httpStatus: number | null; error: string; response: string | null }) =>
    Effect.gen(function* () {
      yield* record(result)
      yield* Effect.logWarning("Webhook delivery attempt failed").pipe(
        Effect.annotateLogs({ eventId, attempt, redelivery, endpointId: event.endpointId, error: result.error })
      )
      if (result.httpStatus === 410) {
        yield* retryTransient(repo.disable(event.endpointId, "The receiver answered 410 Gone"))
        yield* retryTransient(
          repo.failed(eventId, redelivery, "The receiver answered 410 Gone; the webhook is disabled")
        )
        return "stop" as const
      }
      const expired = yield* retryTransient(
        repo.failing(event.endpointId, Duration.toMillis(config.webhookDisableAfter))
      )
      if (expired) {
        const reason = `Every delivery failed for ${Duration.format(config.webhookDisableAfter)} (WEBHOOK_DISABLE_AFTER)`
        yield* retryTransient(repo.disable(event.endpointId, reason))
        yield* retryTransient(repo.failed(eventId, redelivery, `${reason}; the webhook is disabled`))
        return "stop" as const
      }
      return "retry" as const
    })

  const owner = { tenantId: event.tenantId, kind: event.ownerKind, id: event.ownerId }
  const secret = box.open(event.secret, owner)
  if (secret === undefined) {
    return yield* failure({
      httpStatus: null,
      error:
        "The signing secret cannot be decrypted: WEBHOOK_SECRET_KEY changed since it was stored, or it was not " +
        "stored for this webhook; rotate the secret",
      response: null
    })
  }
  const url = Guard.parseUrl(event.url)
  if (Result.isFailure(url)) return yield* failure({ httpStatus: null, error: url.failure, response: null })
  const target = yield* Effect.result(guard.check(url.success))
  if (Result.isFailure(target)) {
    return yield* failure({ httpStatus: null, error: target.failure, response: null })
  }
  const timestamp = Math.floor((yield* Clock.currentTimeMillis) / 1000)
  const previous = event.previousSecret === null ? undefined : box.open(event.previousSecret, owner)
  const signatures = [secret, ...(previous === undefined ? [] : [previous])].map((key) =>
    sign(key, eventId, timestamp, event.body)
  )
  const answer = yield* Effect.result(
    Guard.post({
      url: url.success,
      address: target.success.addresses[0]!,
      headers: {
        "content-type": "application/json",
        "user-agent": userAgent,
        "webhook-id": eventId,
        "webhook-timestamp": String(timestamp),
        "webhook-signature": signatures.join(" ")
      },
      body: event.body,
      timeout: config.webhookTimeout,
      maxBody: maxResponseBytes
    })
  )
  if (Result.isFailure(answer)) return yield* failure({ httpStatus: null, error: answer.failure, response: null })
  const { status, location } = answer.success
  // A private target's answer stays out of the log the tenant reads: it would read internal services back.
  const body = target.success.public ? answer.success.body : null
  if (status >= 200 && status < 300) {
    yield* record({ httpStatus: status, error: null, response: body })
    yield* retryTransient(repo.delivered(eventId, redelivery, event.endpointId))
    return "delivered" as const
  }
  return yield* failure({
    httpStatus: status,
    error:
      status >= 300 && status < 400
        ? `Redirect not followed (HTTP ${status}${location === undefined ? "" : `, Location: ${location}`})`
        : `HTTP ${status}`,
    response: body
  })
})

const run = Traced.fn("Webhooks.deliver")(function* ({
  eventId,
  redelivery
}: {
  readonly eventId: string
  readonly redelivery: number
}) {
  const { webhookRetrySchedule } = yield* AppConfig
  const repo = yield* WebhooksRepo
  const attempts = webhookRetrySchedule.length + 1
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const outcome: Outcome = yield* Activity.make({
      name: `attempt:${attempt}`,
      success: Outcome,
      execute: attemptOnce(eventId, redelivery, attempt).pipe(
        // A database that stays out beyond the retries: the attempt is tried again later, as a failure.
        Effect.catchCause((cause) =>
          Effect.as(Effect.logError("A webhook delivery attempt could not run", cause), "retry" as const)
        )
      )
    })
    if (outcome !== "retry") return
    if (attempt < attempts) {
      yield* DurableClock.sleep({ name: `wait:${attempt}`, duration: webhookRetrySchedule[attempt - 1]! })
    }
  }
  yield* Activity.make({
    name: "exhausted",
    execute: retryTransient(repo.failed(eventId, redelivery, `All ${attempts} attempts failed`)).pipe(Effect.orDie)
  })
})

export const layer = DeliveryWorkflow.toLayer(run).pipe(
  Layer.provide([WebhooksRepo.layer, SecretBox.layer, Guard.EgressGuard.layer])
)
