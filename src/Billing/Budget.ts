import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { Plan } from "../Auth/Api.ts"
import { setLimitHeaders } from "../Auth/Middleware.ts"
import { AppConfig } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { ModelNotAllowed, TokenBudgetSpent } from "../Domain/Problems.ts"
import { CountedToday, Quota, utcDay } from "./Quota.ts"
import { BillingRepo } from "./Repo.ts"
import * as Traced from "../Platform/Traced.ts"

/** Where a tenant stands today with model tokens. */
export interface TokenStanding {
  readonly plan: Plan
  /** null: the plan is unlimited. */
  readonly budget: number | null
  readonly used: number
  readonly remaining: number | null
  readonly resetAt: Date
}

/** Whether `model` matches one of `patterns`: an exact id, or a prefix ending in `*`. None: every model. */
export const modelAllowed = (patterns: Option.Option<ReadonlyArray<string>>, model: string): boolean =>
  Option.match(patterns, {
    onNone: () => true,
    onSome: (list) =>
      list.some((pattern) => pattern.endsWith("*") ? model.startsWith(pattern.slice(0, -1)) : pattern === model)
  })

/**
 * What model calls may cost a tenant: the models its plan may use and the
 * plan's daily token budget, across chat, executions and team runs. Every
 * model call on a tenant's behalf is admitted here first and charged here
 * after, so the count is one number per tenant and day, kept in Postgres
 * (the same row as the request count) and exact across nodes. A call is
 * admitted while tokens remain, so calls running together may end a little
 * past the budget; the next one is refused. Team runs, when they come, call
 * `admit` before each model call and `charge` after it, as execution steps do.
 */
export class TokenBudget extends Context.Service<TokenBudget>()("agent-host/TokenBudget", {
  make: Effect.gen(function*() {
    const repo = yield* BillingRepo
    const quota = yield* Quota
    const config = yield* AppConfig

    const budgetOf = (plan: Plan) =>
      plan === "free" ? config.freeDailyTokens : plan === "pro" ? config.proDailyTokens : null

    const modelsOf = (plan: Plan) =>
      plan === "free" ? config.freeModels : plan === "pro" ? config.proModels : config.businessModels

    // Where the tenant stands today. Read by this request's own count a
    // moment ago (key-authenticated routes); for a check before a model call
    // (`gate`), also by the tenant's last count when its plan has no limit
    // (its tokens have no budget to check, and a plan change would have been
    // heard); otherwise (a step, a turn of a team run, a report) read now.
    const standingOf = Effect.fnUntraced(function*(tenantId: TenantId, gate: boolean) {
      const { day, resetAt } = utcDay(yield* Clock.currentTimeMillis)
      const counted = yield* CountedToday
      const known = counted !== undefined && counted.tenantId === tenantId && counted.day === day
        ? counted
        : gate
        ? quota.knownUnlimited(tenantId, day)
        : undefined
      const usage = known !== undefined
        ? { plan: known.plan, tokens: known.tokens }
        : yield* Effect.andThen(quota.settled(tenantId), repo.usage(tenantId, day))
      const budget = budgetOf(usage.plan)
      return {
        plan: usage.plan,
        budget,
        used: usage.tokens,
        remaining: budget === null ? null : Math.max(0, budget - usage.tokens),
        resetAt
      } satisfies TokenStanding
    })

    const standing = Traced.fn("TokenBudget.standing")(function*(tenantId: TenantId) {
      return yield* standingOf(tenantId, false)
    })

    const refuseModel = (plan: Plan, model: string) =>
      new ModelNotAllowed({
        detail: `The ${plan} plan may not use the model "${model}"`,
        plan,
        model
      })

    /** The plan may use `model`; read now, so a plan change applies at once. */
    const checkModel = Traced.fn("TokenBudget.checkModel")(function*(tenantId: TenantId, model: string) {
      const { plan } = yield* standingOf(tenantId, true)
      if (!modelAllowed(modelsOf(plan), model)) return yield* refuseModel(plan, model)
    })

    const unspent = (today: TokenStanding) =>
      config.enforceDailyLimits && today.remaining !== null && today.remaining <= 0
        ? Effect.fail(
          new TokenBudgetSpent({
            detail: `The ${today.plan} plan allows ${today.budget} model tokens per day and they are spent; ` +
              `the budget resets at ${today.resetAt.toISOString()}`,
            plan: today.plan,
            budget: today.budget!,
            used: today.used,
            resetAt: today.resetAt.toISOString()
          })
        )
        : Effect.succeed(today)

    /** Before a model call: the plan may use `model` and has tokens left today. */
    const admit = Traced.fn("TokenBudget.admit")(function*(tenantId: TenantId, model: string) {
      // Nothing to read when nothing is enforced and every plan may use every model.
      if (!config.enforceDailyLimits && [config.freeModels, config.proModels, config.businessModels].every(Option.isNone)) return
      const today = yield* standingOf(tenantId, true)
      if (!modelAllowed(modelsOf(today.plan), model)) return yield* refuseModel(today.plan, model)
      return yield* unspent(today)
    })

    /** Before work that will call models (an execution): the plan has tokens left today. */
    const admitWork = Traced.fn("TokenBudget.admitWork")(function*(tenantId: TenantId) {
      // Nothing to read when nothing is enforced.
      if (!config.enforceDailyLimits) return
      yield* unspent(yield* standingOf(tenantId, true))
    })

    /**
     * After a model call: its tokens (input plus output) count against today's
     * budget, written before this returns (a run's step is stored after its
     * charge, so a run killed in between charges the step again, never not).
     * Steps charging together share one statement (Quota).
     */
    const charge = Traced.fn("TokenBudget.charge")(function*(tenantId: TenantId, tokens: number) {
      if (!config.enforceDailyLimits || tokens <= 0) return
      yield* quota.chargeAndWait(tenantId, tokens)
    })

    /**
     * After a chat's model call: the same, without waiting for the write. It
     * goes with the tenant's next count (Quota), in order, so the next
     * request reads it; a node killed in between loses it.
     */
    const chargeInBackground = (tenantId: TenantId, tokens: number) =>
      !config.enforceDailyLimits || tokens <= 0 ? Effect.void : quota.charge(tenantId, tokens)

    return { standing, checkModel, admit, admitWork, charge, chargeInBackground, modelsOf } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide([BillingRepo.layer, Quota.layer]))
}

/** On a refusal for the token budget, the RateLimit headers describe the budget, with Retry-After. */
export const withBudgetHeaders = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.tapError(effect, (error) =>
    error instanceof TokenBudgetSpent ? setLimitHeaders(error.budget, 0, new Date(error.resetAt), true) : Effect.void)
