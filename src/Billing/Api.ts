import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Plan, SessionAuth, sessionCredential } from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"

export const BillingStatus = Schema.Struct({
  plan: Plan,
  limit: Schema.NullOr(Schema.Int).annotate({ description: "Requests per UTC day; null when unlimited." }),
  usedToday: Schema.Int,
  remainingToday: Schema.NullOr(Schema.Int),
  tokenBudget: Schema.NullOr(Schema.Int).annotate({
    description: "Model tokens (input plus output) per UTC day, across chat and executions; null when unlimited."
  }),
  tokensUsedToday: Schema.Int,
  tokensRemainingToday: Schema.NullOr(Schema.Int),
  models: Schema.NullOr(Schema.Array(Schema.String)).annotate({
    description: "The models the plan may use (exact ids, or prefixes ending in `*`); null: every model."
  }),
  resetAt: Schema.Date
})

export class BillingApi extends HttpApiGroup.make("billing")
  .add(HttpApiEndpoint.get("status", "/", { success: BillingStatus }).annotateMerge(operation({
    summary: "Get the plan and today's usage",
    description: "The tenant's plan, its daily request and model-token limits, what is used and left of them " +
      "today (UTC), the models the plan may use, and when the day resets.",
    credential: sessionCredential
  })))
  .middleware(SessionAuth)
  .prefix("/api/billing")
  .annotateMerge(OpenApi.annotations({
    title: "Billing",
    description: "The tenant's plan and its daily limits: API-key requests and model tokens."
  }))
{}
