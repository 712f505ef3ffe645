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
}): Effect.Effect<
  {
    readonly get: (tenantId: string, id: string) => Effect.Effect<Option.Option<A>, E>
    readonly forget: (tenantId: string, id: string) => Effect.Effect<void>
  },
  never,
  ListenerSql | Scope.Scope
> =>
  Effect.gen(function*() {
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
        return Cache.invalidate(cached, key)
      })
    const listener = yield* ListenerSql
    yield* Effect.gen(function*() {
      const changed = yield* listener.listen(options.channel)
      generation++
      yield* Cache.invalidateAll(cached)
      listening = true
      while (true) yield* forgetKey((yield* Queue.take(changed)).payload)
    }).pipe(
      Effect.scoped,
      Effect.ensuring(Effect.sync(() => {
        listening = false
      })),
      Effect.tapCause((cause) => Effect.logWarning(`${options.what} change listener lost; reconnecting`, cause)),
      Effect.retry(Schedule.spaced("1 second")),
      Effect.forkScoped
    )
    const get = (tenantId: string, id: string) =>
      listening ? Effect.map(Cache.get(cached, `${tenantId}/${id}`), ({ value }) => value) : options.lookup({ tenantId, id })
    const forget = (tenantId: string, id: string) => forgetKey(`${tenantId}/${id}`)
    return { get, forget } as const
  })
