import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as OpenApi from "effect/http-api/OpenApi"
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

export const maxUsageDays = 90

export const UsageDay = Schema.Struct({
  day: Schema.String.annotate({ description: "The UTC day, YYYY-MM-DD." }),
  requests: Schema.Int.annotate({ description: "Requests counted against the plan that day." }),
  tokens: Schema.Number.annotate({ description: "Model tokens (input plus output) charged that day." })
})

export const UsageHistory = Schema.Struct({
  plan: Plan,
  limit: Schema.NullOr(Schema.Int).annotate({
    description: "Today's limit of requests per UTC day; null when unlimited."
  }),
  tokenBudget: Schema.NullOr(Schema.Int).annotate({
    description: "Today's model tokens per UTC day; null when unlimited."
  }),
  days: Schema.Array(UsageDay).annotate({
    description: "One entry per UTC day, oldest first, ending today; days without use count 0."
  })
})

export class BillingApi extends HttpApiGroup.make("billing")
  .add(
    HttpApiEndpoint.get("status", "/", { success: BillingStatus }).annotateMerge(
      operation({
        summary: "Get the plan and today's usage",
        description:
          "The tenant's plan, its daily request and model-token limits, what is used and left of them " +
          "today (UTC), the models the plan may use, and when the day resets.",
        credential: sessionCredential
      })
    )
  )
  .add(
    HttpApiEndpoint.get("usage", "/usage", {
      query: {
        days: Schema.optionalKey(
          Schema.NumberFromString.pipe(
            Schema.decodeTo(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxUsageDays })))
          ).annotate({ description: `How many UTC days, ending today: 1 to ${maxUsageDays} (default 30).` })
        )
      },
      success: UsageHistory
    }).annotateMerge(
      operation({
        summary: "Get requests and tokens per day",
        description:
          "Requests counted against the plan and model tokens charged, per UTC day, oldest first and " +
          "ending today, with 0 for days without use; beside them the plan and today's limits.",
        credential: sessionCredential,
        errors: `400 when \`days\` is not an integer from 1 to ${maxUsageDays}.`
      })
    )
  )
  .middleware(SessionAuth)
  .prefix("/api/billing")
  .annotateMerge(
    OpenApi.annotations({
      title: "Billing",
      description: "The tenant's plan and its daily limits: API-key requests and model tokens."
    })
  ) {}
