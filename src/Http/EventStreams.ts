import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { AppConfig } from "../Config.ts"
import { ListenerSql } from "../Database/Sql.ts"
import { newId } from "../Domain/Ids.ts"
import { TooManyStreams } from "../Domain/Problems.ts"
import { EventStreamsRepo, runEventsChannel } from "./EventStreamsRepo.ts"

/** What following a run's event log needs from its feature. */
export interface FollowOptions<Event extends { readonly id: string; readonly type: string }, End> {
  /** The run whose events are followed: the notifications of `run_events` name it. */
  readonly runId: string
  /** Its events after an id, oldest first, at most `pageSize` of them. */
  readonly read: (afterId: string) => Effect.Effect<ReadonlyArray<Event>>
  /** The most events one `read` returns: a batch this long may have more behind it. */
  readonly pageSize: number
  readonly isFinal: (type: string) => boolean
  readonly lastEventId: string
  readonly now: number
  /** When (ms) the stream stops: whatever was logged meanwhile, then `end` unless the run just finished. */
  readonly endsAt: number
  readonly end: End
}

/**
 * The event streams of a node (executions, team runs, streamed chats):
 *
 * - Each open stream holds a place among its tenant's
 *   MAX_EVENT_STREAMS_PER_TENANT, counted across the cluster in the database
 *   (`event_stream_slots`), under a lease this node renews while the stream
 *   is open; past the cap, 429. The place is given back when the stream ends,
 *   fails or its client goes away, and a dead node's places come back once
 *   their lease runs out.
 * - One LISTEN per node on `run_events` wakes the streams that follow a run
 *   when its events are written (a trigger notifies at commit, for followed
 *   runs only); each then reads its new events once. Without a notification
 *   a stream reads every EVENT_STREAM_FALLBACK_POLL, so a lost notification
 *   (or a lost listener) only delays.
 */
export class EventStreams extends Context.Service<
  EventStreams,
  {
    /** A place for a stream that follows no run (a streamed chat), for the request's scope. */
    readonly hold: (tenantId: string) => Effect.Effect<void, TooManyStreams, Scope.Scope>
    /**
     * A place for a stream that follows a run, for the request's scope, and
     * the run's event log as it grows: what is logged already after
     * `lastEventId`, then what follows, until a final event or `endsAt`.
     */
    readonly follow: <Event extends { readonly id: string; readonly type: string }, End>(
      tenantId: string,
      options: FollowOptions<Event, End>
    ) => Effect.Effect<Stream.Stream<Event | End>, TooManyStreams, Scope.Scope>
  }
>()("agent-host/EventStreams") {
  static readonly layer = Layer.effect(
    EventStreams,
    Effect.gen(function* () {
      const config = yield* AppConfig
      const repo = yield* EventStreamsRepo
      const listener = yield* ListenerSql
      const max = config.maxEventStreamsPerTenant
      const lease = config.eventStreamSlotLease
      const node = newId()
      const held = new Set<string>()
      const tooMany = new TooManyStreams({
        detail: `At most ${max} event streams may be open at once; close one first`,
        limit: max
      })

      // This node's places are renewed together, a third of a lease apart,
      // and places whose lease ran out (a dead node's) are dropped.
      yield* Effect.suspend(() => repo.renew([...held], lease)).pipe(
        Effect.catchCause((cause) => Effect.logWarning("Event stream places could not be renewed", cause)),
        Effect.repeat(Schedule.spaced(Duration.divideUnsafe(lease, 3))),
        Effect.forkScoped
      )

      // The streams waiting on each run, each with a wake-up of one place
      // (a notification while it reads is kept for its next wait).
      const waiting = new Map<string, Set<Queue.Queue<void>>>()
      const wake = (runId: string) => {
        const queues = waiting.get(runId)
        if (queues !== undefined) for (const queue of queues) Queue.offerUnsafe(queue, undefined)
      }
      const wakeAll = () => {
        for (const queues of waiting.values()) for (const queue of queues) Queue.offerUnsafe(queue, undefined)
      }
      yield* Effect.gen(function* () {
        const notified = yield* listener.listen(runEventsChannel)
        // Whatever was written while no one listened: every stream reads again.
        wakeAll()
        while (true) wake((yield* Queue.take(notified)).payload)
      }).pipe(
        Effect.scoped,
        Effect.tapCause((cause) => Effect.logWarning("Run event listener lost; reconnecting", cause)),
        Effect.retry(Schedule.spaced("1 second")),
        Effect.forkScoped
      )

      const take = (tenantId: string, runId: string | null) =>
        Effect.gen(function* () {
          const id = newId()
          const taken = yield* Effect.acquireRelease(
            Effect.tap(repo.take({ id, tenantId, node, runId, cap: max, lease }), (taken) =>
              Effect.sync(() => {
                if (taken) held.add(id)
              })
            ),
            (taken) =>
              taken
                ? Effect.suspend(() => {
                    held.delete(id)
                    // A place whose release failed is no longer renewed: its lease gives it back.
                    return repo
                      .release(id)
                      .pipe(
                        Effect.catchCause((cause) =>
                          Effect.logWarning("An event stream's place could not be released", cause)
                        )
                      )
                  })
                : Effect.void
          )
          if (!taken) return yield* tooMany
        })

      /** A wake-up for the run's notifications, for the scope. */
      const watch = (runId: string) =>
        Effect.acquireRelease(
          Effect.gen(function* () {
            const queue = yield* Queue.dropping<void>(1)
            let queues = waiting.get(runId)
            if (queues === undefined) waiting.set(runId, (queues = new Set()))
            queues.add(queue)
            return queue
          }),
          (queue) =>
            Effect.sync(() => {
              const queues = waiting.get(runId)
              queues?.delete(queue)
              if (queues?.size === 0) waiting.delete(runId)
            })
        )

      const follow = <Event extends { readonly id: string; readonly type: string }, End>(
        tenantId: string,
        options: FollowOptions<Event, End>
      ) =>
        Effect.gen(function* () {
          // The place names the run before the first read: from then on its events notify.
          yield* take(tenantId, options.runId)
          const woken = yield* watch(options.runId)
          const next = Queue.take(woken).pipe(Effect.timeoutOption(config.eventStreamFallbackPoll), Effect.asVoid)
          return followLog(options, next)
        })

      return EventStreams.of({ hold: (tenantId) => take(tenantId, null), follow })
    })
  ).pipe(Layer.provide(EventStreamsRepo.layer))
}

/**
 * A run's event log as it grows: what is logged already after `lastEventId`,
 * then, after each `next` (a notification or the fallback poll), what
 * followed, until a final event. A full page is read on at once. At `endsAt`
 * it stops: whatever was logged meanwhile, then `end` unless the run just
 * finished.
 */
const followLog = <Event extends { readonly id: string; readonly type: string }, End>(
  options: FollowOptions<Event, End>,
  next: Effect.Effect<void>
): Stream.Stream<Event | End> => {
  // What the client has received: where a last catch-up starts, and whether it is over.
  let delivered = /^\d{1,18}$/.test(options.lastEventId) ? options.lastEventId : "0"
  let finished = false
  const final = (batch: ReadonlyArray<Event>) => batch.some((event) => options.isFinal(event.type))
  const live = Stream.paginate({ after: delivered, wait: false }, ({ after, wait }) =>
    Effect.gen(function* () {
      if (wait) yield* next
      const batch = yield* options.read(after)
      if (batch.length === 0) return [batch, Option.some({ after, wait: true })] as const
      if (final(batch)) return [batch, Option.none()] as const
      return [
        batch,
        Option.some({ after: batch[batch.length - 1]!.id, wait: batch.length < options.pageSize })
      ] as const
    })
  ).pipe(
    Stream.interruptWhen(Effect.sleep(Duration.millis(Math.max(0, options.endsAt - options.now)))),
    Stream.tap((event) =>
      Effect.sync(() => {
        delivered = event.id
        if (options.isFinal(event.type)) finished = true
      })
    )
  )
  const last = Stream.unwrap(
    Effect.suspend(() =>
      finished
        ? Effect.succeed(Stream.empty)
        : Effect.map(options.read(delivered), (batch) =>
            Stream.fromIterable<Event | End>(final(batch) ? batch : [...batch, options.end])
          )
    )
  )
  return Stream.concat(live, last)
}
