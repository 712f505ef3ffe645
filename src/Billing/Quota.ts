import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { Plan } from "../Auth/Api.ts"
import { AppConfig } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { TooManyRequests } from "../Domain/Problems.ts"
import { BillingRepo } from "./Repo.ts"

/** Where a tenant stands today, after the request being counted. */
export interface Allowance {
  readonly plan: Plan
  /** null: the plan is unlimited. */
  readonly limit: number | null
  readonly used: number
  readonly remaining: number | null
  readonly resetAt: Date
}

/**
 * The tenant's day as the request's own count read it: plan and model tokens
 * used so far, at the start of the request. The token budget checks a model
 * call of the same request against it instead of reading the day again.
 */
export interface CountedDay {
  readonly tenantId: TenantId
  readonly day: string
  readonly plan: Plan
  readonly tokens: number
}

export const CountedToday = Context.Reference<CountedDay | undefined>("agent-host/CountedToday", {
  defaultValue: () => undefined
})

const dayMs = 86_400_000

/** The UTC day of `now` (YYYY-MM-DD) and the moment it ends. */
export const utcDay = (now: number) => {
  const start = now - (now % dayMs)
  return { day: new Date(start).toISOString().slice(0, 10), resetAt: new Date(start + dayMs) }
}

interface Waiter {
  readonly deferred: Deferred.Deferred<Allowance & { readonly counted: CountedDay }, TooManyRequests>
}

/**
 * The daily request limits of the plans. Counting is exact across nodes (the
 * database decides, atomically), and cheap: the requests of one tenant that
 * arrive while its previous count is on its way to the database are counted
 * together in the next statement, on a pool whose commits do not wait for
 * the disk. A refused request is not counted.
 */
export class Quota extends Context.Service<Quota>()("agent-host/Quota", {
  make: Effect.gen(function*() {
    const repo = yield* BillingRepo
    const config = yield* AppConfig
    const scope = yield* Effect.scope
    const limitOf = (plan: Plan) =>
      plan === "free" ? config.freeDailyLimit : plan === "pro" ? config.proDailyLimit : null

    // Days whose counter row this node has seen exist, so most batches need one statement.
    let knownDay = ""
    const knownRows = new Set<string>()
    const pending = new Map<string, Array<Waiter>>()
    const draining = new Set<string>()

    const countBatch = (tenantId: TenantId, waiters: ReadonlyArray<Waiter>) =>
      Effect.gen(function*() {
        const { day, resetAt } = utcDay(yield* Clock.currentTimeMillis)
        if (day !== knownDay) {
          knownDay = day
          knownRows.clear()
        }
        if (!knownRows.has(tenantId)) {
          yield* repo.ensureDay(tenantId, day)
          knownRows.add(tenantId)
        }
        const request = {
          tenantId,
          day,
          n: waiters.length,
          freeLimit: config.freeDailyLimit,
          proLimit: config.proDailyLimit
        }
        let found = yield* repo.consume(request)
        if (Option.isNone(found)) {
          // The row this node knew of is gone (deleted by an operator, or a
          // restored backup): make it again rather than fail until midnight.
          yield* repo.ensureDay(tenantId, day)
          found = yield* repo.consume(request)
        }
        if (Option.isNone(found)) return yield* Effect.die(new Error(`No tenant ${tenantId} to count for`))
        const counted = found.value
        const limit = limitOf(counted.plan)
        const granted = counted.after - counted.before
        const countedDay: CountedDay = { tenantId, day, plan: counted.plan, tokens: counted.tokens }
        for (const [i, waiter] of waiters.entries()) {
          if (i < granted) {
            const used = counted.before + i + 1
            yield* Deferred.succeed(waiter.deferred, {
              plan: counted.plan,
              limit,
              used,
              remaining: limit === null ? null : limit - used,
              resetAt,
              counted: countedDay
            })
          } else {
            yield* Deferred.fail(
              waiter.deferred,
              new TooManyRequests({
                detail: `The ${counted.plan} plan allows ${limit} requests per day; the limit resets at ${resetAt.toISOString()}`,
                plan: counted.plan,
                limit: limit ?? 0,
                resetAt: resetAt.toISOString()
              })
            )
          }
        }
      }).pipe(
        // A failed count fails its requests, never the others.
        Effect.catchCause((cause) => Effect.forEach(waiters, (waiter) => Deferred.failCause(waiter.deferred, cause)))
      )

    const drain = (tenantId: TenantId): Effect.Effect<void> =>
      Effect.gen(function*() {
        while (true) {
          const waiters = pending.get(tenantId)
          if (waiters === undefined) {
            draining.delete(tenantId)
            return
          }
          pending.delete(tenantId)
          yield* countBatch(tenantId, waiters)
        }
      })

    const consume = Effect.fn("Quota.consume")(function*(tenantId: TenantId) {
      const deferred = yield* Deferred.make<Allowance & { readonly counted: CountedDay }, TooManyRequests>()
      const waiters = pending.get(tenantId)
      if (waiters === undefined) pending.set(tenantId, [{ deferred }])
      else waiters.push({ deferred })
      if (!draining.has(tenantId)) {
        draining.add(tenantId)
        yield* Effect.forkIn(drain(tenantId), scope)
      }
      return yield* Deferred.await(deferred)
    })

    /** Today's standing without counting anything. */
    const today = Effect.fn("Quota.today")(function*(tenantId: TenantId) {
      const { day, resetAt } = utcDay(yield* Clock.currentTimeMillis)
      const usage = yield* repo.usage(tenantId, day)
      const limit = limitOf(usage.plan)
      return {
        plan: usage.plan,
        limit,
        used: usage.used,
        remaining: limit === null ? null : Math.max(0, limit - usage.used),
        resetAt
      } satisfies Allowance
    })

    return { consume, today } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(BillingRepo.layer))
}

