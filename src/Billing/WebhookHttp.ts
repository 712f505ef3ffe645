import { Effect, Layer } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { StripeWebhook } from "./Webhook.ts"

export const StripeWebhookHttp = HttpApiBuilder.group(
  Api,
  "stripeWebhook",
  Effect.fn(function*(handlers) {
    const webhook = yield* StripeWebhook
    return handlers.handleAll({
      receive: ({ headers, payload }) => webhook.receive({ signature: headers["stripe-signature"], body: payload })
    })
  })
)

export const layer = StripeWebhookHttp.pipe(Layer.provide(StripeWebhook.layer))
