import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Plan, SessionAuth } from "../Auth/Api.ts"

export const BillingStatus = Schema.Struct({
  plan: Plan,
  limit: Schema.NullOr(Schema.Int).annotate({ description: "Requests per UTC day; null when unlimited." }),
  usedToday: Schema.Int,
  remainingToday: Schema.NullOr(Schema.Int),
  resetAt: Schema.Date
})

export class BillingApi extends HttpApiGroup.make("billing")
  .add(HttpApiEndpoint.get("status", "/", { success: BillingStatus }))
  .middleware(SessionAuth)
  .prefix("/api/billing")
  .annotateMerge(OpenApi.annotations({ title: "Billing" }))
{}
