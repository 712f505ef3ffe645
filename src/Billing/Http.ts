import { Effect, Layer, Option } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { TokenBudget } from "./Budget.ts"
import { Quota } from "./Quota.ts"

export const BillingHttp = HttpApiBuilder.group(
  Api,
  "billing",
  Effect.fn(function*(handlers) {
    const quota = yield* Quota
    const budget = yield* TokenBudget
    return handlers.handleAll({
      status: Effect.fn(function*() {
        const { tenantId } = yield* CurrentPrincipal
        const today = yield* quota.today(tenantId)
        const tokens = yield* budget.standing(tenantId)
        return {
          plan: today.plan,
          limit: today.limit,
          usedToday: today.used,
          remainingToday: today.remaining,
          tokenBudget: tokens.budget,
          tokensUsedToday: tokens.used,
          tokensRemainingToday: tokens.remaining,
          models: Option.getOrNull(budget.modelsOf(tokens.plan)),
          resetAt: today.resetAt
        }
      })
    })
  })
)

export const layer = BillingHttp.pipe(Layer.provide(TokenBudget.layer))
