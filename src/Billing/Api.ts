import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { Plan, SessionAuth } from "../Auth/Api.ts"

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

export const maxUsageDays = 90

export const UsageDay = Schema.Struct({
  day: Schema.String.annotate({ description: "The UTC day, YYYY-MM-DD." }),
  requests: Schema.Int.annotate({ description: "Requests counted against the plan that day." }),
  tokens: Schema.Number.annotate({ description: "Model tokens (input plus output) charged that day." })
})

export const UsageHistory = Schema.Struct({
  plan: Plan,
  limit: Schema.NullOr(Schema.Int).annotate({ description: "Today's limit of requests per UTC day; null when unlimited." }),
  tokenBudget: Schema.NullOr(Schema.Int).annotate({ description: "Today's model tokens per UTC day; null when unlimited." }),
  days: Schema.Array(UsageDay).annotate({ description: "One entry per UTC day, oldest first, ending today; days without use count 0." })
})

export class BillingApi extends HttpApiGroup.make("billing")
  .add(HttpApiEndpoint.get("status", "/", { success: BillingStatus }))
  .add(HttpApiEndpoint.get("usage", "/usage", {
    query: {
      days: Schema.optionalKey(
        Schema.NumberFromString.pipe(
          Schema.decodeTo(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxUsageDays })))
        ).annotate({ description: `How many UTC days, ending today: 1 to ${maxUsageDays} (default 30).` })
      )
    },
    success: UsageHistory
  }))
  .middleware(SessionAuth)
  .prefix("/api/billing")
  .annotateMerge(OpenApi.annotations({ title: "Billing" }))
{}
