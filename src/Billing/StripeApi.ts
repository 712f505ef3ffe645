import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { Text } from "../Domain/Input.ts"
import { operation } from "../Domain/ApiDocs.ts"
import { ServiceUnavailable } from "../Domain/Problems.ts"

/**
 * A delivery we refuse and that changes nothing: no or a bad `Stripe-Signature`,
 * a timestamp outside the tolerance, or a body that is not a Stripe event.
 * `detail` says which.
 */
export class InvalidWebhook extends HttpApiError.Problem<InvalidWebhook>()("InvalidWebhook", {
  type: "urn:agent-host:problem:invalid-webhook",
  status: 400,
  title: "Invalid Webhook"
}) {}

export const WebhookOutcome = Schema.Literals(["processed", "ignored", "failed", "duplicate"]).annotate({
  description:
    "`duplicate`: the event id was received before and nothing was done again. " +
    "`failed`: the event was signed but unusable; it is recorded, and retrying would not help."
})
export type WebhookOutcome = typeof WebhookOutcome.Type

export const WebhookReceipt = Schema.Struct({
  received: Schema.Literal(true),
  outcome: WebhookOutcome
})
export type WebhookReceipt = typeof WebhookReceipt.Type

// The signature covers the exact bytes Stripe sent, so the body is taken as
// bytes; parsing and re-serialising JSON would break it.
export const StripeEventBody = Schema.Uint8Array.pipe(HttpApiSchema.asUint8Array({ contentType: "application/json" }))

/**
 * What Stripe sends: an event object. Other fields (object, livemode,
 * api_version, request...) are allowed and not described. Only the OpenAPI
 * document uses it (see {@link documentAsEvent}): the handler verifies the
 * signature over the raw bytes of {@link StripeEventBody} before it parses them.
 */
export const StripeEvent = Schema.Struct({
  id: Schema.String.annotate({
    description: "The event's id (`evt_...`); an id received before is not applied again."
  }),
  type: Schema.String.annotate({
    description: "The event type, such as `checkout.session.completed` or `customer.subscription.updated`."
  }),
  created: Schema.Int.annotate({ description: "When the event was created, in Unix seconds." }),
  data: Schema.Struct({
    object: Schema.Record(Schema.String, Schema.Unknown).annotate({
      description: "The object the event is about: a Checkout Session or a Subscription for the types applied here."
    })
  }).annotate({ description: "The event's payload." })
}).annotate({ title: "StripeEvent", description: "A Stripe event, exactly as Stripe sends it." })

const stripeEventJsonSchema = Schema.toJsonSchemaDocument(StripeEvent).schema

/**
 * Declares the request body as the event object it is. A binary payload is
 * documented as a string, which a validating client or proxy would hold a real
 * event (a JSON object) against and refuse.
 */
const documentAsEvent = (operation: Record<string, any>) => ({
  ...operation,
  requestBody: {
    ...operation.requestBody,
    content: {
      ...operation.requestBody?.content,
      "application/json": { ...operation.requestBody?.content?.["application/json"], schema: stripeEventJsonSchema }
    }
  }
})

/** Stripe's event deliveries. No auth middleware: the signature is the authentication. */
export class StripeWebhookApi extends HttpApiGroup.make("stripeWebhook")
  .add(
    HttpApiEndpoint.post("receive", "/api/webhooks/stripe", {
      headers: {
        "stripe-signature": Schema.optionalKey(Text).annotate({
          description: "`t=<unix seconds>,v1=<hex HMAC-SHA256>`, as Stripe signs every delivery."
        })
      },
      payload: StripeEventBody,
      success: WebhookReceipt,
      error: [InvalidWebhook, ServiceUnavailable]
    })
      .annotateMerge(OpenApi.annotations({ transform: documentAsEvent }))
      .annotateMerge(
        operation({
          summary: "Receive a Stripe event",
          description:
            "Stripe event deliveries (checkout.session.completed, customer.subscription.created/updated/deleted) " +
            "keep the tenant's plan in step with its subscription; other event types are acknowledged and ignored. Each event id is applied at most once.",
          credential:
            "No credential: the `Stripe-Signature` header (STRIPE_WEBHOOK_SECRET) authenticates the delivery.",
          errors:
            "400 on a missing or bad signature, a timestamp outside the tolerance, or a body that is not a Stripe " +
            "event; 503 when STRIPE_WEBHOOK_SECRET is not set."
        })
      )
  )
  .annotateMerge(
    OpenApi.annotations({
      title: "Stripe webhook",
      description: "Subscription changes from Stripe. Requests must carry a valid `Stripe-Signature`."
    })
  ) {}
