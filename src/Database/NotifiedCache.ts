import * as Cache from "effect/Cache"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import { ListenerSql } from "./Sql.ts"

/**
 * A tenant's rows as last read, by `tenantId/id`, for the request and run
 * paths of a node: a change on any node drops the row's entry on every node
 * through a notification on `channel` (`pg_notify` with the row's key, sent
 * by the changing statement itself, so at its commit), and on the changing
 * node at once (`forget`). The cache is only trusted while this node
 * listens; each (re)connection starts it empty. A read that overlapped a
 * change is not kept (`generation`), and a row that was not found is never
 * remembered.
 */
export const make = <A, E>(options: {
  readonly channel: string
  /** What is cached, for the log line when the listener is lost: "Agent". */
  readonly what: string
  readonly lookup: (row: { readonly tenantId: string; readonly id: string }) => Effect.Effect<Option.Option<A>, E>
  /** How long a node trusts what it read; notifications make it current, this only bounds a missed one. */
  readonly timeToLive: Duration.Duration
  readonly capacity: number
  /** Told of every change heard or made here (`tenantId`), and of a (re)connection (undefined: anything may have changed). */
  readonly onChange?: (tenantId: string | undefined) => void
}): Effect.Effect<
  {
    readonly get: (tenantId: string, id: string) => Effect.Effect<Option.Option<A>, E>
    readonly forget: (tenantId: string, id: string) => Effect.Effect<void>
    /** Whether changes are heard now; nothing read before may be trusted otherwise. */
    readonly listening: () => boolean
  },
  never,
  ListenerSql | Scope.Scope
> =>
  Effect.gen(function* () {
    let listening = false
    let generation = 0
    const cached = yield* Cache.makeWith(
      (key: string) => {
        const started = generation
        const [tenantId, id] = key.split("/") as [string, string]
        return Effect.map(options.lookup({ tenantId, id }), (value) => ({ value, started }))
      },
      {
        capacity: options.capacity,
        timeToLive: (exit) =>
          Exit.isSuccess(exit) && Option.isSome(exit.value.value) && exit.value.started === generation
            ? options.timeToLive
            : Duration.zero
      }
    )
    const forgetKey = (key: string) =>
      Effect.suspend(() => {
        generation++
        options.onChange?.(key.slice(0, key.indexOf("/")))
        return Cache.invalidate(cached, key)
      })
    const listener = yield* ListenerSql
    yield* Effect.gen(function* () {
      const changed = yield* listener.listen(options.channel)
      generation++
      options.onChange?.(undefined)
      yield* Cache.invalidateAll(cached)
      listening = true
      while (true) yield* forgetKey((yield* Queue.take(changed)).payload)
    }).pipe(
      Effect.scoped,
      Effect.ensuring(
        Effect.sync(() => {
          listening = false
        })
      ),
      Effect.tapCause((cause) => Effect.logWarning(`${options.what} change listener lost; reconnecting`, cause)),
      Effect.retry(Schedule.spaced("1 second")),
      Effect.forkScoped
    )
    const get = (tenantId: string, id: string) =>
      listening
        ? Effect.map(Cache.get(cached, `${tenantId}/${id}`), ({ value }) => value)
        : options.lookup({ tenantId, id })
    const forget = (tenantId: string, id: string) => forgetKey(`${tenantId}/${id}`)
    return { get, forget, listening: () => listening } as const
  })

/**
 * Reads of a tenant's rows taken together (the pages of its list), kept by
 * `tenantId` and a key of the read, beside a NotifiedCache of the same rows:
 * any change of one of the tenant's rows drops all of them (`drop`, from the
 * cache's `onChange`). Only used while the cache listens; a read that
 * overlapped a change is not kept. At most `perTenant` reads per tenant and
 * `capacity` in all, the tenants read longest ago leaving first.
 */
export const makeTenantReads = <A>(options: {
  readonly timeToLive: Duration.Duration
  readonly capacity: number
  readonly perTenant: number
}) => {
  const ttl = Duration.toMillis(options.timeToLive)
  // Insertion order is the order of last use (an entry read is moved to the end).
  const tenants = new Map<string, Map<string, { readonly value: A; readonly expiresAt: number }>>()
  let size = 0
  let generation = 0

  const drop = (tenantId: string | undefined) => {
    generation++
    if (tenantId === undefined) {
      tenants.clear()
      size = 0
      return
    }
    const reads = tenants.get(tenantId)
    if (reads === undefined) return
    size -= reads.size
    tenants.delete(tenantId)
  }

  const keep = (tenantId: string, key: string, value: A) => {
    let reads = tenants.get(tenantId)
    if (reads === undefined) {
      reads = new Map()
      tenants.set(tenantId, reads)
    }
    if (reads.size >= options.perTenant && !reads.has(key)) {
      size -= reads.size
      reads.clear()
    }
    if (!reads.has(key)) size++
    reads.set(key, { value, expiresAt: Date.now() + ttl })
    while (size > options.capacity) {
      const [oldest, oldestReads] = tenants.entries().next().value!
      size -= oldestReads.size
      tenants.delete(oldest)
    }
  }

  /** The read kept for `tenantId` and `key`, else `read`'s result, kept if no change overlapped it. */
  const get = <E, R>(tenantId: string, key: string, read: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.suspend(() => {
      const reads = tenants.get(tenantId)
      const found = reads?.get(key)
      if (found !== undefined && found.expiresAt > Date.now()) {
        tenants.delete(tenantId)
        tenants.set(tenantId, reads!)
        return Effect.succeed(found.value)
      }
      const started = generation
      return Effect.map(read, (value) => {
        if (generation === started) keep(tenantId, key, value)
        return value
      })
    })

  return { get, drop } as const
}
