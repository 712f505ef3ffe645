import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type * as SqlClient from "effect/sql/SqlClient"

/**
 * Group commit: items submitted while a batch is being written go together
 * in the next one, and each submitter waits for its own item's result. No
 * item waits for a timer: an idle batcher writes what arrived in the same
 * tick at once. `write` answers the items' results in their order, or fails
 * the whole batch.
 *
 * A submitter that stops waiting (interrupted) does not take its item back:
 * like a statement already sent, it is written with its batch.
 *
 * Batches are written outside any transaction: a caller inside one must
 * write on its own, in it (`inTransaction`).
 */
export interface Batcher<A, B, E> {
  readonly submit: (item: A) => Effect.Effect<B, E>
}

export const make = <A, B, E>(options: {
  readonly write: (items: ReadonlyArray<A>) => Effect.Effect<ReadonlyArray<B>, E>
  /** At most this many items in one batch. */
  readonly maxSize: number
}): Batcher<A, B, E> => {
  let queue: Array<{ readonly item: A; readonly done: Deferred.Deferred<B, E> }> = []
  let writing = false

  const drain: Effect.Effect<void> = Effect.suspend(() => {
    if (queue.length === 0) {
      writing = false
      return Effect.void
    }
    const batch = queue.length <= options.maxSize ? queue : queue.slice(0, options.maxSize)
    queue = queue.length <= options.maxSize ? [] : queue.slice(options.maxSize)
    const items = batch.map((entry) => entry.item)
    return options.write(items).pipe(
      Effect.exit,
      Effect.map((exit) => {
        if (Exit.isSuccess(exit)) {
          for (let i = 0; i < batch.length; i++) Deferred.doneUnsafe(batch[i]!.done, Exit.succeed(exit.value[i]!))
        } else {
          for (const entry of batch) Deferred.doneUnsafe(entry.done, Exit.failCause(exit.cause))
        }
      }),
      // A defect in the batcher itself fails the batch rather than stranding its waiters.
      Effect.catchCause((cause) =>
        Effect.sync(() => {
          for (const entry of batch) Deferred.doneUnsafe(entry.done, Exit.failCause(cause))
        })
      ),
      Effect.andThen(drain)
    )
  })

  return {
    submit: (item) =>
      Effect.suspend(() => {
        const done = Deferred.makeUnsafe<B, E>()
        queue.push({ item, done })
        if (writing) return Deferred.await(done)
        writing = true
        // Started on the next tick, so that what the same tick submits goes with it.
        return Effect.andThen(
          Effect.forkDetach(Effect.andThen(Effect.yieldNow, Effect.uninterruptible(drain))),
          Deferred.await(done)
        )
      })
  }
}

/** Whether the current fiber is inside a transaction of `client`. */
export const inTransaction = (client: SqlClient.SqlClient): Effect.Effect<boolean> =>
  Effect.map(Effect.serviceOption(client.transactionService), Option.isSome)
