import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import { operation } from "../Domain/ApiDocs.ts"
import { cursorParam } from "../Domain/Cursor.ts"
import { Text, text } from "../Domain/Input.ts"
import type { Doc } from "../Domain/Management.ts"
import { BadRequest, Conflict, NotFound, RedeliveryLimitReached, RedeliveryRateLimited } from "../Domain/Problems.ts"
import { WebhookEndpoint } from "./Endpoint.ts"

// Schemas of outbound webhooks, shared by every feature whose runs send
// events (team rooms, orchestrations), and the routes of an owner's webhook,
// which those features add to their groups (`webhookEndpoints`).

/** A webhook URL as a client sends it; the service checks it further (scheme, host, SSRF) when it is set. */
export const WebhookUrl = text(
  Schema.isMinLength(1, { message: "Expected a URL" }),
  Schema.isMaxLength(2048, { message: "Expected a URL of at most 2048 characters" })
).annotate({
  description: "An http(s) URL. Every address its host resolves to must be public unless WEBHOOK_ALLOW_PRIVATE=true."
})

/** Where a feature's events go, as its resource shows it: its webhook endpoint's JSON. */
export const WebhookState = WebhookEndpoint.json
export type WebhookState = typeof WebhookState.Type

/** The signing secret, shown once: when a webhook URL is first set, and on each rotation. */
export const SigningSecret = Schema.Struct({
  signingSecret: Schema.String.annotate({
    description: "`whsec_` + base64 of the HMAC-SHA256 key (Standard Webhooks)."
  }),
  previousSecretExpiresAt: Schema.NullOr(Schema.Date).annotate({
    description: "Until then, deliveries also carry a signature with the previous secret."
  })
})
export type SigningSecret = typeof SigningSecret.Type

export const DeliveryAttempt = Schema.Struct({
  eventId: Schema.String.annotate({ description: "The `webhook-id` header: the same on every attempt of one event." }),
  type: Schema.String,
  subjectId: Schema.String.annotate({ description: "The run or execution the event is about." }),
  attempt: Schema.Int.annotate({
    description: "1 for the first attempt of a delivery; a redelivery starts again at 1."
  }),
  redelivery: Schema.Int.annotate({ description: "0 for the original delivery, n for the n-th redelivery." }),
  at: Schema.Date,
  url: Schema.String,
  httpStatus: Schema.NullOr(Schema.Int),
  error: Schema.NullOr(Schema.String).annotate({
    description: "Why the attempt failed: refused address, timeout, connection error, redirect, status."
  }),
  durationMs: Schema.Int,
  response: Schema.NullOr(Schema.String).annotate({
    description: "The first 1 KB of the response body; null for a private target."
  })
})
export type DeliveryAttempt = typeof DeliveryAttempt.Type

export const DeliveryList = Schema.Struct({
  data: Schema.Array(DeliveryAttempt),
  total: Schema.Int,
  nextCursor: Schema.NullOr(Schema.String)
})

export const Redelivery = Schema.Struct({
  eventId: Schema.String,
  status: Schema.Literal("pending")
})

/** What a redelivery route answers besides 202, for every feature's route. */
export const RedeliveryErrors = [NotFound, RedeliveryLimitReached, RedeliveryRateLimited] as const

/** How a redelivery route's refusals read in its documentation. */
export const redeliveryRefusals =
  "409 `redelivery-limit-reached` when the event was redelivered WEBHOOK_MAX_REDELIVERIES " +
  "times (10 by default); 429 `redelivery-rate-limited` with Retry-After past WEBHOOK_REDELIVERIES_PER_TENANT " +
  "redeliveries per WEBHOOK_REDELIVERY_WINDOW for the tenant (30 per 10 minutes by default)."

/** Keys of the delivery log: attempts are numbered in the order they were made. */
export const isAttemptKey = (key: string): boolean => /^[1-9]\d{0,17}$/.test(key)

export const maxDeliveryPageSize = 200
export const defaultDeliveryPageSize = 50

/** `limit` and `cursor` of a delivery log. */
export const DeliveryPageQuery = {
  limit: Schema.optionalKey(
    Schema.NumberFromString.pipe(
      Schema.decodeTo(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxDeliveryPageSize })))
    ).annotate({ description: `Page size, 1 to ${maxDeliveryPageSize} (default ${defaultDeliveryPageSize}).` })
  ),
  cursor: Schema.optionalKey(cursorParam(isAttemptKey))
}

/**
 * The routes of an owner's webhook, under the owner's `/:id`: its delivery
 * log, the redelivery of an event and the rotation of its signing secret (at
 * `secretPath`), an owner of another tenant being a 404. Their documentation
 * is the usual sentences about `name`, but where `docs` says more.
 */
export const webhookEndpoints = <Id extends Schema.Top, const SecretPath extends `/:id/${string}`>(owner: {
  /** The owner in a sentence: "orchestration", "team". */
  readonly name: string
  readonly id: Id
  readonly secretPath: SecretPath
  /** Who may call them: one of the sentences of src/Auth/Api.ts. */
  readonly credential: string
  readonly docs: {
    readonly deliveries: Doc & Pick<Required<Doc>, "summary" | "description">
    readonly redeliver: Doc & Pick<Required<Doc>, "summary">
    readonly rotateSecret: Doc & Pick<Required<Doc>, "summary" | "description">
  }
}) => {
  const { credential, docs, name } = owner
  const notFound = `404 when the ${name} is not the tenant's`
  return {
    deliveries: HttpApiEndpoint.get("deliveries", "/:id/deliveries", {
      params: { id: owner.id },
      query: DeliveryPageQuery,
      success: DeliveryList,
      error: [NotFound, BadRequest]
    }).annotateMerge(
      operation({ errors: `400 on a bad \`limit\` or \`cursor\`, ${notFound}.`, ...docs.deliveries, credential })
    ),
    redeliver: HttpApiEndpoint.post("redeliver", "/:id/deliveries/:eventId/redeliver", {
      params: { id: owner.id, eventId: Text },
      success: Redelivery.pipe(HttpApiSchema.status(202)),
      error: RedeliveryErrors
    }).annotateMerge(
      operation({
        description:
          "Sends an event again: the same `webhook-id`, a new timestamp and signature, and a fresh retry " +
          "schedule.",
        errors: `${notFound} or has no such event; ${redeliveryRefusals}`,
        ...docs.redeliver,
        credential
      })
    ),
    rotateSecret: HttpApiEndpoint.post("rotateSecret", owner.secretPath, {
      params: { id: owner.id },
      success: SigningSecret,
      error: [NotFound, Conflict]
    }).annotateMerge(
      operation({ errors: `${notFound}, 409 when it has no webhook URL.`, ...docs.rotateSecret, credential })
    )
  } as const
}
