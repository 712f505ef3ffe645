import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"

/** Notified with a run's id (an execution's or a team run's) when events of a followed run are written (migration 0023). */
export const runEventsChannel = "run_events"

const interval = (duration: Duration.Duration) => `${Math.max(1, Math.ceil(Duration.toMillis(duration)))} milliseconds`

/** All SQL of the places open event streams hold (`event_stream_slots`, migration 0023). */
export class EventStreamsRepo extends Context.Service<EventStreamsRepo>()("agent-host/EventStreamsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /** Takes one of the tenant's `cap` places for `slotId`, in one statement; false when all are taken. */
    const take = (slot: {
      readonly id: string
      readonly tenantId: string
      readonly node: string
      readonly runId: string | null
      readonly cap: number
      readonly lease: Duration.Duration
    }) =>
      sql<{ taken: boolean }>`
        SELECT take_event_stream_slot(${slot.id}, ${slot.tenantId}, ${slot.node}, ${slot.runId}, ${slot.cap},
                                      ${interval(slot.lease)}::interval) AS taken`.pipe(
        Effect.map(([row]) => row?.taken === true),
        Effect.orDie
      )

    const release = (id: string) =>
      sql`DELETE FROM event_stream_slots WHERE id = ${id}`.pipe(Effect.asVoid, Effect.orDie)

    /**
     * Extends the lease of these places (the streams this node has open) and
     * drops every place whose lease ran out, whichever node held it.
     */
    const renew = (ids: ReadonlyArray<string>, lease: Duration.Duration) =>
      Effect.gen(function* () {
        if (ids.length > 0) {
          // Ids are made here (newId) and hold no comma: one text parameter whatever their number.
          yield* sql`
            UPDATE event_stream_slots SET lease_until = now() + ${interval(lease)}::interval
            WHERE id = ANY (string_to_array(${ids.join(",")}, ','))`
        }
        yield* sql`DELETE FROM event_stream_slots WHERE lease_until < now()`
      }).pipe(Effect.orDie)

    return { take, release, renew } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
