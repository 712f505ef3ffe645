import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { TokenBudget } from "./Budget.ts"
import { Quota, utcDay } from "./Quota.ts"
import { BillingRepo } from "./Repo.ts"
import * as Traced from "../Observability/Traced.ts"

export const BillingHttp = HttpApiBuilder.group(
  Api,
  "billing",
  Traced.fn(function* (handlers) {
    const quota = yield* Quota
    const budget = yield* TokenBudget
    const repo = yield* BillingRepo
    return handlers.handleAll({
      usage: Traced.fn(function* ({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        const now = yield* Clock.currentTimeMillis
        const days = query.days ?? 30
        const [today, tokens, history] = yield* Effect.all(
          [
            quota.today(tenantId),
            budget.standing(tenantId),
            repo.history(tenantId, utcDay(now - (days - 1) * 86_400_000).day, utcDay(now).day)
          ],
          { concurrency: "unbounded" }
        )
        return { plan: today.plan, limit: today.limit, tokenBudget: tokens.budget, days: history }
      }),
      status: Traced.fn(function* () {
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

export const layer = BillingHttp.pipe(Layer.provide([TokenBudget.layer, BillingRepo.layer]))
