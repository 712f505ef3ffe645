import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { Plan } from "../Auth/Api.ts"
import { setLimitHeaders } from "../Auth/Middleware.ts"
import { AppConfig } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { ModelNotAllowed, TokenBudgetSpent } from "../Domain/Problems.ts"
import { CountedToday, Quota, remainingOf, utcDay } from "./Quota.ts"
import { BillingRepo } from "./Repo.ts"
import * as Traced from "../Observability/Traced.ts"

/** Where a tenant stands today with model tokens. */
export interface TokenStanding {
  readonly plan: Plan
  /** null: the plan is unlimited. */
  readonly budget: number | null
  readonly used: number
  readonly remaining: number | null
  readonly resetAt: Date
}

/**
 * A model call's hold on the tenant's day: what it reserved of the budget
 * before it was made, given back when it settles its real count.
 */
export interface Reservation {
  readonly tenantId: TenantId
  /** The UTC day reserved on; the call's tokens count on it, whenever it settles. */
  readonly day: string
  /** Tokens held of the day's budget; 0 when none (a plan without a budget, or nothing enforced). */
  readonly reserved: number
  /** The prompt's tokens, as estimated. */
  readonly promptTokens: number
  /** The ceiling on the reply sent to the provider (`max_tokens`), the plan's. */
  readonly maxOutputTokens: number
  /** False when ENFORCE_DAILY_LIMITS is off: nothing is counted. */
  readonly counted: boolean
}

/** What the caller knows of a call before reserving for it. */
export interface CallEstimate {
  /** Checked against the plan's models; undefined when the caller checked it a moment ago. */
  readonly model: string | undefined
  /** Tokens of the prompt (system prompt and messages), as estimated for the model's provider. */
  readonly promptTokens: number
  /** The tenant's plan as the request found it, when it did: business then needs no statement. */
  readonly plan?: Plan | undefined
}

// Whether a failure leaves the provider unbilled: a model call's failure
// (Models' ModelError) with an HTTP error status, or one that never asked it;
// any other failure is the caller's own, before the call.
const unbilled = (error: unknown) => {
  if (typeof error !== "object" || error === null || (error as { _tag?: unknown })._tag !== "ModelError") return true
  const { reason, status } = error as { readonly reason?: string; readonly status?: number }
  return status !== undefined || reason === "NotConfigured" || reason === "UnknownModel"
}

/**
 * The tokens a model call that ended without a reply may have cost: none
 * when it never reached the provider or the provider refused it (an HTTP
 * error status: nothing is billed); otherwise (a timeout, a cut connection,
 * an interruption) its whole worst case, since the provider may have read
 * the prompt and written up to max_tokens before it noticed: counting less
 * would let the day's budget be passed by the calls that were cut.
 */
export const costOfFailure = (reservation: Reservation, cause: Cause.Cause<unknown>): number => {
  if (!Cause.hasInterrupts(cause) && !Cause.hasDies(cause)) {
    const error = Cause.findErrorOption(cause)
    if (Option.isSome(error) && unbilled(error.value)) return 0
  }
  return reservation.promptTokens + reservation.maxOutputTokens
}

/** Whether `model` matches one of `patterns`: an exact id, or a prefix ending in `*`. None: every model. */
export const modelAllowed = (patterns: Option.Option<ReadonlyArray<string>>, model: string): boolean =>
  Option.match(patterns, {
    onNone: () => true,
    onSome: (list) =>
      list.some((pattern) => (pattern.endsWith("*") ? model.startsWith(pattern.slice(0, -1)) : pattern === model))
  })

/**
 * What model calls may cost a tenant: the models its plan may use and the
 * plan's daily token budget, across chat, executions and team runs. Every
 * model call on a tenant's behalf reserves its worst case here first (its
 * prompt's tokens plus the plan's max_tokens, which the call then sends), in
 * the one statement that checks the budget, and settles after: its real
 * tokens are added and the reservation given back, also when it fails or is
 * interrupted. The count is one row per tenant and day in Postgres (the
 * request count's), exact across nodes. A call is admitted while the tokens
 * used and reserved are under the budget, so calls running together, on any
 * nodes, pass it by one reservation at most; the next one is refused.
 *
 * Reservations belong to their day: one a killed process never settled
 * counts until the day ends (the safe side), and a new day starts at zero.
 * A plan without a budget (business), once known, reserves nothing and costs
 * no statement; with ENFORCE_DAILY_LIMITS off nothing is reserved or counted.
 */
export class TokenBudget extends Context.Service<TokenBudget>()("agent-host/TokenBudget", {
  make: Effect.gen(function* () {
    const repo = yield* BillingRepo
    const quota = yield* Quota
    const config = yield* AppConfig

    const budgetOf = (plan: Plan) =>
      plan === "free" ? config.freeDailyTokens : plan === "pro" ? config.proDailyTokens : null

    const modelsOf = (plan: Plan) =>
      plan === "free" ? config.freeModels : plan === "pro" ? config.proModels : config.businessModels

    // A provider refuses a ceiling under 1.
    const maxOutputOf = (plan: Plan) =>
      Math.max(
        1,
        plan === "free"
          ? config.freeMaxOutputTokens
          : plan === "pro"
            ? config.proMaxOutputTokens
            : config.businessMaxOutputTokens
      )

    // Where the tenant stands today. Read by this request's own count a
    // moment ago (key-authenticated routes); for a check before a model call
    // (`gate`), also by the tenant's last count when its plan has no limit
    // (its tokens have no budget to check, and a plan change would have been
    // heard); otherwise (a step, a turn of a team run, a report) read now.
    const standingOf = Effect.fnUntraced(function* (tenantId: TenantId, gate: boolean) {
      const { day, resetAt } = utcDay(yield* Clock.currentTimeMillis)
      const counted = yield* CountedToday
      const known =
        counted !== undefined && counted.tenantId === tenantId && counted.day === day
          ? counted
          : gate
            ? quota.knownUnlimited(tenantId, day)
            : undefined
      const usage =
        known !== undefined
          ? { plan: known.plan, tokens: known.tokens }
          : yield* Effect.andThen(quota.settled(tenantId), repo.usage(tenantId, day))
      const budget = budgetOf(usage.plan)
      const remaining = remainingOf(budget, usage.tokens)
      return { plan: usage.plan, budget, used: usage.tokens, remaining, resetAt } satisfies TokenStanding
    })

    const standing = Traced.fn("TokenBudget.standing")(function* (tenantId: TenantId) {
      return yield* standingOf(tenantId, false)
    })

    const refuseModel = (plan: Plan, model: string) =>
      new ModelNotAllowed({
        detail: `The ${plan} plan may not use the model "${model}"`,
        plan,
        model
      })

    /** The plan may use `model`; read now, so a plan change applies at once. */
    const checkModel = Traced.fn("TokenBudget.checkModel")(function* (tenantId: TenantId, model: string) {
      const { plan } = yield* standingOf(tenantId, true)
      if (!modelAllowed(modelsOf(plan), model)) return yield* refuseModel(plan, model)
    })

    const unspent = (today: TokenStanding) =>
      config.enforceDailyLimits && today.remaining !== null && today.remaining <= 0
        ? Effect.fail(
            new TokenBudgetSpent({
              detail:
                `The ${today.plan} plan allows ${today.budget} model tokens per day and they are spent; ` +
                `the budget resets at ${today.resetAt.toISOString()}`,
              plan: today.plan,
              budget: today.budget!,
              used: today.used,
              resetAt: today.resetAt.toISOString()
            })
          )
        : Effect.succeed(today)

    /**
     * Before a request that will call a model (a chat), from what the request
     * read already where it can: the plan may use `model` and has tokens left
     * today. The call itself then reserves its worst case (`reserve`).
     */
    const admit = Traced.fn("TokenBudget.admit")(function* (tenantId: TenantId, model: string) {
      // Nothing to read when nothing is enforced and every plan may use every model.
      if (
        !config.enforceDailyLimits &&
        [config.freeModels, config.proModels, config.businessModels].every(Option.isNone)
      )
        return
      const today = yield* standingOf(tenantId, true)
      if (!modelAllowed(modelsOf(today.plan), model)) return yield* refuseModel(today.plan, model)
      return yield* unspent(today)
    })

    /** Before work that will call models (an execution): the plan has tokens left today. */
    const admitWork = Traced.fn("TokenBudget.admitWork")(function* (tenantId: TenantId) {
      // Nothing to read when nothing is enforced.
      if (!config.enforceDailyLimits) return
      yield* unspent(yield* standingOf(tenantId, true))
    })

    const spent = (plan: Plan, budget: number, used: number, resetAt: Date) =>
      new TokenBudgetSpent({
        detail:
          used >= budget
            ? `The ${plan} plan allows ${budget} model tokens per day and they are spent; ` +
              `the budget resets at ${resetAt.toISOString()}`
            : `The ${plan} plan allows ${budget} model tokens per day and what is left is reserved by model calls ` +
              `in flight; try again once they end, or after the budget resets at ${resetAt.toISOString()}`,
        plan,
        budget,
        used: Math.round(used),
        resetAt: resetAt.toISOString()
      })

    /**
     * Before a model call: the plan may use the model, and the call's worst
     * case (`promptTokens` plus the plan's max_tokens) is reserved of the
     * day's budget while tokens used and reserved are under it, in one
     * statement (BillingRepo.reserve); refused otherwise. The reservation
     * says which max_tokens to send. Settle it after the call, whatever its
     * outcome: make the call through `reserving`.
     */
    const reserve = Traced.fn("TokenBudget.reserve")(function* (tenantId: TenantId, call: CallEstimate) {
      const { day, resetAt } = utcDay(yield* Clock.currentTimeMillis)
      const promptTokens = Math.max(0, Math.ceil(call.promptTokens))
      const unreserved = (plan: Plan, counted: boolean): Reservation => ({
        tenantId,
        day,
        reserved: 0,
        promptTokens,
        maxOutputTokens: maxOutputOf(plan),
        counted
      })
      if (!config.enforceDailyLimits) {
        // Plans are not enforced: business's ceiling, and no plan to read unless models are listed.
        if (call.model !== undefined) yield* admit(tenantId, call.model)
        return unreserved("business", false)
      }
      const counted = yield* CountedToday
      const known =
        call.plan ??
        (counted !== undefined && counted.tenantId === tenantId && counted.day === day
          ? counted.plan
          : quota.knownUnlimited(tenantId, day)?.plan)
      if (known === "business") {
        if (call.model !== undefined && !modelAllowed(modelsOf(known), call.model))
          return yield* refuseModel(known, call.model)
        return unreserved(known, true)
      }
      const found = yield* repo.reserve({
        tenantId,
        day,
        promptTokens,
        freeBudget: config.freeDailyTokens,
        proBudget: config.proDailyTokens,
        freeMaxOutput: maxOutputOf("free"),
        proMaxOutput: maxOutputOf("pro"),
        businessMaxOutput: maxOutputOf("business")
      })
      if (Option.isNone(found)) return yield* Effect.die(new Error(`No tenant ${tenantId}`))
      const { budget, estimate, granted, plan, tokens } = found.value
      const reservation: Reservation = { ...unreserved(plan, true), reserved: granted ? estimate : 0 }
      if (call.model !== undefined && !modelAllowed(modelsOf(plan), call.model)) {
        if (granted) yield* quota.charge(tenantId, day, 0, estimate)
        return yield* refuseModel(plan, call.model)
      }
      if (budget !== null && !granted) return yield* spent(plan, budget, tokens, resetAt)
      return reservation
    })

    // Reservations whose settlement has been handed to Quota: a guard (`reserving`)
    // settles in its place only what was not.
    const handedOff = new WeakSet<Reservation>()
    const idle = (reservation: Reservation, tokens: number) =>
      !reservation.counted || (tokens <= 0 && reservation.reserved <= 0)

    /**
     * After a model call: its tokens (input plus output) count on the
     * reservation's day and the reservation is given back, written before
     * this returns (a run's step is stored after it, so a run killed in
     * between charges the step again, never not). Calls settling together
     * share one statement (Quota); a failed write fails this, nothing of it
     * written, to be settled again. Handed to Quota at once, uninterrupted:
     * an interruption stops the wait, not the write.
     */
    const settle = (reservation: Reservation, tokens: number) =>
      Effect.uninterruptible(
        Effect.suspend(() => {
          if (idle(reservation, tokens)) return Effect.void
          handedOff.add(reservation)
          return quota.chargeAndWait(reservation.tenantId, reservation.day, Math.max(0, tokens), reservation.reserved)
        })
      ).pipe(Traced.withSpan("TokenBudget.settle"))

    /**
     * The same, without waiting for the write: it goes with the tenant's next
     * count (Quota), in order, so the next request reads it. A node killed in
     * between loses it, and the reservation stays counted until its day ends.
     */
    const settleInBackground = (reservation: Reservation, tokens: number) =>
      Effect.uninterruptible(
        Effect.suspend(() => {
          if (idle(reservation, tokens)) return Effect.void
          handedOff.add(reservation)
          return quota.charge(reservation.tenantId, reservation.day, Math.max(0, tokens), reservation.reserved)
        })
      )

    /** Whether the reservation's settlement has been handed over (`settle`, `settleInBackground`). */
    const settling = (reservation: Reservation) => handedOff.has(reservation)

    /**
     * Reserves (`reservation`, e.g. `reserve(...)`), makes the call with the
     * reservation (its max_tokens), then `after` with its reply, which
     * settles it (`settle` or `settleInBackground`). Whatever ends this
     * first (a failure, an interruption) before `after` has handed the
     * settlement over, the reservation is settled in the background: with
     * the reply's tokens once it came, else with what the call may have cost
     * (`costOfFailure`: `call` fails with the model's own ModelError, or with
     * an error of its own before the model is asked). Nothing can come
     * between the reservation and this guard, so no interruption leaves a
     * reservation unsettled.
     */
    const reserving = <
      E1,
      R1,
      A extends { readonly inputTokens: number; readonly outputTokens: number },
      E2,
      R2,
      B,
      E3,
      R3
    >(
      reservation: Effect.Effect<Reservation, E1, R1>,
      call: (reservation: Reservation) => Effect.Effect<A, E2, R2>,
      after: (reply: A, reservation: Reservation) => Effect.Effect<B, E3, R3>
    ): Effect.Effect<B, E1 | E2 | E3, R1 | R2 | R3> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(reservation, (held) => {
          let reply: A | undefined
          return restore(
            Effect.flatMap(call(held), (answered) => {
              reply = answered
              return after(answered, held)
            })
          ).pipe(
            Effect.onExit((exit) =>
              Exit.isSuccess(exit) || handedOff.has(held)
                ? Effect.void
                : settleInBackground(
                    held,
                    reply !== undefined ? reply.inputTokens + reply.outputTokens : costOfFailure(held, exit.cause)
                  )
            )
          )
        })
      )

    return {
      standing,
      checkModel,
      admit,
      admitWork,
      reserve,
      settle,
      settleInBackground,
      settling,
      reserving,
      modelsOf,
      maxOutputOf
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide([BillingRepo.layer, Quota.layer]))
}

/** On a refusal for the token budget, the RateLimit headers describe the budget, with Retry-After. */
export const withBudgetHeaders = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.tapError(effect, (error) =>
    error instanceof TokenBudgetSpent ? setLimitHeaders(error.budget, 0, new Date(error.resetAt), true) : Effect.void
  )
