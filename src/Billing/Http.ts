import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { Quota } from "./Quota.ts"

export const BillingHttp = HttpApiBuilder.group(
  Api,
  "billing",
  Effect.fn(function*(handlers) {
    const quota = yield* Quota
    return handlers.handleAll({
      status: Effect.fn(function*() {
        const { tenantId } = yield* CurrentPrincipal
        const today = yield* quota.today(tenantId)
        return {
          plan: today.plan,
          limit: today.limit,
          usedToday: today.used,
          remainingToday: today.remaining,
          resetAt: today.resetAt
        }
      })
    })
  })
)

export const layer = BillingHttp
