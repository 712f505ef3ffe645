import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import type { Plan } from "../Auth/Api.ts"
import { AppConfig } from "../Config.ts"
import { ListenerSql } from "../Database/Sql.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { TooManyRequests } from "../Domain/Problems.ts"
import { BillingRepo } from "./Repo.ts"
import * as Traced from "../Observability/Traced.ts"

/** Where a tenant stands today, after the request being counted. */
export interface Allowance {
  readonly plan: Plan
  /** null: the plan is unlimited. */
  readonly limit: number | null
  /** null: not known when the request went on (a plan without a limit does not wait for its count). */
  readonly used: number | null
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

// The last day asked for: every request asks, and the day rarely changes.
let lastDay = { start: Number.NaN, day: "", resetAt: new Date(0) }

/** The UTC day of `now` (YYYY-MM-DD) and the moment it ends. */
export const utcDay = (now: number): { readonly day: string; readonly resetAt: Date } => {
  const start = now - (now % dayMs)
  if (start !== lastDay.start)
    lastDay = { start, day: new Date(start).toISOString().slice(0, 10), resetAt: new Date(start + dayMs) }
  return lastDay
}

/** What is left of a day's allowance (null: unlimited) once `used` is spent; never below 0. */
export const remainingOf = (allowance: number | null, used: number): number | null =>
  allowance === null ? null : Math.max(0, allowance - used)

/** Where a plan change is announced (a trigger on `tenants`, migration 0015). */
export const tenantPlanChangedChannel = "tenant_plan_changed"

type Counted = Allowance & { readonly counted: CountedDay }

interface Waiter {
  readonly deferred: Deferred.Deferred<Counted, TooManyRequests>
}

/**
 * What one statement writes to a tenant's day: requests waiting for their
 * count, requests already answered, tokens, and reserved tokens given back.
 */
interface Batch {
  readonly waiters: Array<Waiter>
  answered: number
  tokens: number
  /** Reserved tokens given back by calls that have settled (TokenBudget). */
  released: number
  /** The day the tokens and releases belong to (the reservations' day); "" while there are none. */
  tokensDay: string
  /** Charges of tokens whose callers wait until they are written (and charge again if it fails). */
  readonly charged: Array<Deferred.Deferred<void>>
  chargedTokens: number
  /** Done once the batch's statement has ended, whether it wrote or failed. */
  readonly landed: Deferred.Deferred<void>
  /** Ends the wait of a batch nobody waited for, once someone does. */
  readonly needed: Deferred.Deferred<void>
}

// How long what nobody waits for (answered requests, tokens) gathers before
// it is written, unless a request or a read comes to wait for it: one
// statement per tenant and window rather than one per round trip.
const gatherWindow = Duration.millis(25)

// How long charged tokens whose callers wait (a run's step) gather before
// they are written: the charges of many runs' steps in one statement.
const chargedGatherWindow = Duration.millis(5)

/**
 * A tenant's day: its requests counted against the plan's daily limit, and
 * the model tokens it used. Counting is exact across nodes (the database
 * decides, atomically), and cheap: what one tenant's requests and model calls
 * add while its previous write is on its way to the database goes together
 * into the next statement, on a pool whose commits do not wait for the disk.
 * A refused request is not counted.
 *
 * Only a request that may be refused waits for its count. Tokens are added
 * after a model call without waiting, in the same order as the counts, so the
 * next request's count reads them. A tenant whose plan has no limit
 * (business) cannot be refused, so once this node has seen its plan, its
 * requests go on without waiting either. Plan changes reach every node
 * through `tenantPlanChangedChannel` when they commit; a count that reads a
 * limited plan also ends it, and so does a lost listener (nothing is trusted
 * until it listens again). Reads of the day (`settled`) first wait for this
 * node's writes in flight; at shutdown they land before the node stops.
 */
export class Quota extends Context.Service<Quota>()("agent-host/Quota", {
  make: Effect.gen(function* () {
    const repo = yield* BillingRepo
    const config = yield* AppConfig
    const listener = yield* ListenerSql
    const scope = yield* Effect.scope
    // The writes' own scope, made before the finalizer below: at shutdown the
    // finalizer lets the writes in flight land before this scope ends them.
    const writeScope = yield* Scope.fork(scope)
    // Business: neither a request limit here nor a token budget (TokenBudget),
    // so a request of such a plan needs nothing from its count.
    const limitOf = (plan: Plan) =>
      plan === "free" ? config.freeDailyLimit : plan === "pro" ? config.proDailyLimit : null

    // Days whose counter row this node has seen exist, so most batches need one statement.
    let knownDay = ""
    const knownRows = new Set<string>()
    // Per tenant, the batch gathering and the batch being written.
    const pending = new Map<string, Batch>()
    const writing = new Map<string, Batch>()

    // Tenants last counted on a plan without a limit, as that count read their
    // day, while this node listens for plan changes; `planChanges` counts the
    // changes heard, so a count that overlapped one does not add its tenant back.
    const unlimited = new Map<string, CountedDay>()
    let listening = false
    let planChanges = 0

    const write = (tenantId: TenantId, batch: Batch) =>
      Effect.gen(function* () {
        const { day, resetAt } = utcDay(yield* Clock.currentTimeMillis)
        const tokensDay = batch.tokensDay === "" ? day : batch.tokensDay
        if (batch.waiters.length === 0 && batch.answered === 0) {
          // Tokens alone (a step of a run, a turn that was not a request).
          return yield* repo.chargeTokens(tenantId, tokensDay, batch.tokens, batch.released)
        }
        // Tokens of calls reserved before midnight go to their own day, apart from the counts.
        const apart = tokensDay !== day
        if (apart) yield* repo.chargeTokens(tenantId, tokensDay, batch.tokens, batch.released)
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
          n: batch.waiters.length,
          answered: batch.answered,
          tokens: apart ? 0 : batch.tokens,
          released: apart ? 0 : batch.released,
          freeLimit: config.freeDailyLimit,
          proLimit: config.proDailyLimit
        }
        const changesBefore = planChanges
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
        if (limit !== null) unlimited.delete(tenantId)
        else if (listening && changesBefore === planChanges) unlimited.set(tenantId, countedDay)
        for (const [i, waiter] of batch.waiters.entries()) {
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
        Effect.andThen(
          Effect.sync(() => {
            for (const charged of batch.charged) Deferred.doneUnsafe(charged, Exit.void)
          })
        ),
        // A failed write fails its waiting requests and charges, never the
        // others; what nobody waits for is logged as lost.
        Effect.catchCause((cause) =>
          Effect.andThen(
            Effect.andThen(
              Effect.forEach(batch.waiters, (waiter) => Deferred.failCause(waiter.deferred, cause)),
              Effect.forEach(batch.charged, (charged) => Deferred.failCause(charged, cause))
            ),
            // Reservations not given back stay counted until their day ends: the safe side.
            batch.answered > 0 || batch.tokens > batch.chargedTokens
              ? Effect.logWarning("Requests or model tokens of a tenant could not be counted", cause).pipe(
                  Effect.annotateLogs({
                    tenantId,
                    requests: batch.answered,
                    tokens: batch.tokens,
                    released: batch.released
                  })
                )
              : Effect.void
          )
        ),
        Effect.ensuring(Deferred.done(batch.landed, Exit.void))
      )

    // Writes the tenant's batches one after the other until none is gathering.
    const drain = (tenantId: TenantId): Effect.Effect<void> =>
      Effect.gen(function* () {
        while (true) {
          const batch = pending.get(tenantId)
          if (batch === undefined) {
            writing.delete(tenantId)
            return
          }
          if (batch.waiters.length === 0)
            yield* Effect.raceFirst(Effect.sleep(gatherWindow), Deferred.await(batch.needed))
          pending.delete(tenantId)
          writing.set(tenantId, batch)
          yield* write(tenantId, batch)
        }
      })

    // The batch gathering for the tenant, its write started unless one is under way.
    const gathering = (tenantId: TenantId) =>
      Effect.suspend(() => {
        let batch = pending.get(tenantId)
        if (batch === undefined) {
          batch = {
            waiters: [],
            answered: 0,
            tokens: 0,
            released: 0,
            tokensDay: "",
            charged: [],
            chargedTokens: 0,
            landed: Deferred.makeUnsafe(),
            needed: Deferred.makeUnsafe()
          }
          pending.set(tenantId, batch)
        }
        if (writing.has(tenantId)) return Effect.succeed(batch)
        writing.set(tenantId, batch)
        return Effect.as(Effect.forkIn(drain(tenantId), writeScope), batch)
      })

    const consume = Traced.fn("Quota.consume")(function* (tenantId: TenantId) {
      const known = listening ? unlimited.get(tenantId) : undefined
      if (known !== undefined) {
        const { day, resetAt } = utcDay(yield* Clock.currentTimeMillis)
        if (known.day === day) {
          const batch = yield* gathering(tenantId)
          batch.answered++
          return {
            plan: known.plan,
            limit: null,
            used: null,
            remaining: null,
            resetAt,
            counted: known
          } satisfies Counted
        }
      }
      const deferred = Deferred.makeUnsafe<Counted, TooManyRequests>()
      const batch = yield* gathering(tenantId)
      batch.waiters.push({ deferred })
      Deferred.doneUnsafe(batch.needed, Effect.void)
      return yield* Deferred.await(deferred)
    })

    // The batch that takes tokens of `day`; undefined when the one gathering
    // holds another day's (a call reserved before midnight settling after it).
    const gatheringFor = (tenantId: TenantId, day: string) =>
      Effect.map(gathering(tenantId), (batch) => {
        if (batch.tokensDay === "") batch.tokensDay = day
        return batch.tokensDay === day ? batch : undefined
      })

    /**
     * Adds model tokens to the tenant's `day` and gives back `released`
     * reserved tokens of that day, without waiting for the write.
     */
    const charge = (tenantId: TenantId, day: string, tokens: number, released = 0) =>
      Effect.flatMap(gatheringFor(tenantId, day), (batch) => {
        if (batch === undefined) {
          // Rare (around midnight): a statement of its own, its failure logged like a batch's.
          return Effect.asVoid(
            Effect.forkIn(
              repo
                .chargeTokens(tenantId, day, tokens, released)
                .pipe(
                  Effect.catchCause((cause) =>
                    Effect.logWarning("Model tokens of a tenant could not be counted", cause).pipe(
                      Effect.annotateLogs({ tenantId, tokens, released })
                    )
                  )
                ),
              writeScope
            )
          )
        }
        batch.tokens += tokens
        batch.released += released
        return Effect.void
      })

    /**
     * Adds model tokens to the tenant's `day`, gives back `released` reserved
     * tokens, and waits until that is written; fails as the write did
     * (nothing of it was written), to be charged again. Charges made
     * together share a statement: they gather for a few milliseconds, or
     * ride with the tenant's next count.
     */
    const chargeAndWait = (tenantId: TenantId, day: string, tokens: number, released = 0) =>
      Effect.flatMap(gatheringFor(tenantId, day), (batch) => {
        if (batch === undefined) return repo.chargeTokens(tenantId, day, tokens, released)
        const charged = Deferred.makeUnsafe<void>()
        batch.tokens += tokens
        batch.released += released
        batch.chargedTokens += tokens
        batch.charged.push(charged)
        const first = batch.charged.length === 1
        // Once gathered it is written: an interruption ends only the wait.
        return first
          ? Effect.andThen(
              Effect.forkIn(Effect.delay(Deferred.done(batch.needed, Exit.void), chargedGatherWindow), writeScope),
              Effect.interruptible(Deferred.await(charged))
            )
          : Effect.interruptible(Deferred.await(charged))
      })

    /**
     * The tenant's day as its last count read it, while that said its plan
     * has no limit and no plan change has been heard since; else undefined.
     */
    const knownUnlimited = (tenantId: TenantId, day: string): CountedDay | undefined => {
      const known = listening ? unlimited.get(tenantId) : undefined
      return known !== undefined && known.day === day ? known : undefined
    }

    /** Once this node's writes to the tenant's day, made before now, have ended. */
    const settled = (tenantId: TenantId) =>
      Effect.suspend(() => {
        const batch = pending.get(tenantId) ?? writing.get(tenantId)
        if (batch === undefined) return Effect.void
        Deferred.doneUnsafe(batch.needed, Effect.void)
        return Deferred.await(batch.landed)
      })

    // Plan changes, from any node; while not listening, every count is awaited.
    yield* Effect.gen(function* () {
      const changed = yield* listener.listen(tenantPlanChangedChannel)
      planChanges++
      unlimited.clear()
      listening = true
      while (true) {
        const { payload } = yield* Queue.take(changed)
        planChanges++
        unlimited.delete(payload)
      }
    }).pipe(
      Effect.scoped,
      Effect.ensuring(
        Effect.sync(() => {
          listening = false
          unlimited.clear()
        })
      ),
      Effect.tapCause((cause) => Effect.logWarning("Plan change listener lost; reconnecting", cause)),
      Effect.retry(Schedule.spaced("1 second")),
      Effect.forkScoped
    )

    // At shutdown, what was answered or charged already is written first.
    yield* Effect.addFinalizer(() =>
      Effect.forEach([...pending.keys(), ...writing.keys()], (tenantId) => settled(tenantId as TenantId), {
        discard: true
      }).pipe(Effect.timeout("5 seconds"), Effect.ignore)
    )

    /** Today's standing without counting anything. */
    const today = Traced.fn("Quota.today")(function* (tenantId: TenantId) {
      // This node's writes in flight for the tenant are part of its day.
      yield* settled(tenantId)
      const { day, resetAt } = utcDay(yield* Clock.currentTimeMillis)
      const usage = yield* repo.usage(tenantId, day)
      const limit = limitOf(usage.plan)
      const remaining = remainingOf(limit, usage.used)
      return { plan: usage.plan, limit, used: usage.used, remaining, resetAt } satisfies Allowance
    })

    return { consume, charge, chargeAndWait, settled, knownUnlimited, today } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(BillingRepo.layer))
}
