import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { StripeWebhook } from "./Stripe.ts"
import * as Traced from "../Observability/Traced.ts"

export const StripeWebhookHttp = HttpApiBuilder.group(
  Api,
  "stripeWebhook",
  Traced.fn(function* (handlers) {
    const webhook = yield* StripeWebhook
    return handlers.handleAll({
      receive: ({ headers, payload }) => webhook.receive({ signature: headers["stripe-signature"], body: payload })
    })
  })
)

export const layer = StripeWebhookHttp.pipe(Layer.provide(StripeWebhook.layer))
