import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ClusterError from "effect/cluster/ClusterError"
import * as MessageStorage from "effect/cluster/MessageStorage"
import type * as RunnerAddress from "effect/cluster/RunnerAddress"
import * as RunnerStorage from "effect/cluster/RunnerStorage"
import type * as ShardId from "effect/cluster/ShardId"
import * as Snowflake from "effect/cluster/Snowflake"
import * as SqlMessageStorage from "effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "effect/cluster/SqlRunnerStorage"
import * as SqlClient from "effect/sql/SqlClient"

/**
 * The cluster's storage in our Postgres: effect's SQL storage, with fewer
 * statements per workflow where it spends the most.
 *
 * - A reply and the mark on its request (`processed`, `last_reply_id`) are
 *   written by one statement. effect's storage writes them in a transaction
 *   of two statements: BEGIN, UPDATE, INSERT, COMMIT, four round trips where
 *   one does. One statement is as atomic as that transaction and fails the
 *   same way (a second final reply for a request breaks the same unique
 *   index, and nothing is written).
 * - Shard lock confirmations asked for together are one refresh. Before a
 *   workflow's final reply is stored, the cluster confirms that this node
 *   still holds the lock of its shard (a heartbeat and a read of every
 *   advisory lock the node holds, on the one connection that holds them);
 *   workflows on different shards each asked for their own, one after the
 *   other on that connection: two statements, two socket writes and a read
 *   of some 300 rows per workflow. Here a confirmation waits up to
 *   `refreshGatherWindow` for others, and every confirmation asked for while
 *   a refresh is in flight is answered by the next refresh, which starts
 *   after it was asked: a reply is still never stored on the strength of a
 *   check made before it asked. The wait delays only the cluster's own
 *   reply: an execution's or team run's status is written before it.
 */

const withTracerDisabled = Effect.withTracerEnabled(false)

/**
 * Saves a reply and marks its request in one statement. A reply's kind is 0
 * for the final reply (WithExit) and NULL for a chunk.
 */
export const makeSaveReply = (client: SqlClient.SqlClient): MessageStorage.Encoded["saveReply"] => {
  const sql = client.withoutTransforms()
  const messages = sql("cluster_messages")
  const replies = sql("cluster_replies")
  return (reply) =>
    Effect.suspend(() =>
      reply._tag === "WithExit"
        ? sql`
            WITH request AS (
              UPDATE ${messages} SET processed = TRUE, last_reply_id = ${reply.id}
              WHERE request_id = ${reply.requestId}
            )
            INSERT INTO ${replies} (id, kind, request_id, payload, sequence)
            VALUES (${reply.id}, 0, ${reply.requestId}, ${JSON.stringify(reply.exit)}, NULL)
          `
        : sql`
            WITH request AS (
              UPDATE ${messages} SET last_reply_id = ${reply.id} WHERE id = ${reply.requestId}
            )
            INSERT INTO ${replies} (id, kind, request_id, payload, sequence)
            VALUES (${reply.id}, NULL, ${reply.requestId}, ${JSON.stringify(reply.values)}, ${reply.sequence})
          `
    ).pipe(Effect.asVoid, ClusterError.PersistenceError.refail, withTracerDisabled)
}

/** effect's SQL message storage (its tables made by its migrations), each reply saved in one statement. */
export const messageStorageLayer = Layer.effect(
  MessageStorage.MessageStorage,
  Effect.gen(function*() {
    const encoded = yield* SqlMessageStorage.makeEncoded()
    const saveReply = makeSaveReply(yield* SqlClient.SqlClient)
    return yield* MessageStorage.makeEncoded({ ...encoded, saveReply })
  })
).pipe(Layer.provide(Snowflake.layerGenerator))

interface PendingRefresh {
  readonly address: RunnerAddress.RunnerAddress
  readonly shards: Set<ShardId.ShardId>
  readonly done: Deferred.Deferred<Array<ShardId.ShardId>, ClusterError.PersistenceError>
}

/** How long a lock confirmation waits for others to share its refresh. */
export const refreshGatherWindow = Duration.millis(20)

/**
 * Runner storage whose lock refreshes are coalesced: the first asked waits
 * `gather` for others, and while one is in flight the shards asked for
 * gather into the next, which starts as soon as it ends. Each caller gets the
 * shards of its own request that are still held. An empty refresh (the
 * cluster's liveness probe) passes straight through.
 */
export const coalesceRefreshes = (
  storage: RunnerStorage.RunnerStorage["Service"],
  gather: Duration.Duration = refreshGatherWindow
) =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    let next: PendingRefresh | undefined
    let running = false

    // Runs the gathered refreshes one after the other until none is waiting.
    const drain: Effect.Effect<void> = Effect.suspend(() => {
      const batch = next
      next = undefined
      if (batch === undefined) {
        running = false
        return Effect.void
      }
      return storage.refresh(batch.address, batch.shards).pipe(
        Effect.exit,
        Effect.flatMap((exit) => Deferred.done(batch.done, exit)),
        Effect.onInterrupt(() => Deferred.interrupt(batch.done)),
        Effect.andThen(drain)
      )
    })

    // The window, then the drain; ended early (the node stopping), it leaves
    // no confirmation waiting.
    const gathered = Effect.andThen(Effect.sleep(gather), drain).pipe(
      Effect.onInterrupt(() => Effect.suspend(() => next === undefined ? Effect.void : Deferred.interrupt(next.done)))
    )

    // Starts the drain unless it runs; the flag and the fork are one step, so
    // an interrupted caller cannot leave the flag set with nothing draining.
    const ensureDraining = Effect.uninterruptible(Effect.suspend(() => {
      if (running) return Effect.void
      running = true
      return Effect.asVoid(Effect.forkIn(gathered, scope, { startImmediately: true }))
    }))

    const sameAddress = (a: RunnerAddress.RunnerAddress, b: RunnerAddress.RunnerAddress) =>
      a.host === b.host && a.port === b.port

    const refresh: RunnerStorage.RunnerStorage["Service"]["refresh"] = (address, shardIds) =>
      Effect.suspend(() => {
        const asked = Array.from(shardIds)
        if (asked.length === 0) return storage.refresh(address, asked)
        // Only this node's own address is ever refreshed; anything else is not gathered.
        if (next !== undefined && !sameAddress(next.address, address)) return storage.refresh(address, asked)
        const batch = next ??= { address, shards: new Set(), done: Deferred.makeUnsafe() }
        for (const shardId of asked) batch.shards.add(shardId)
        return Effect.andThen(ensureDraining, Deferred.await(batch.done)).pipe(
          Effect.map((held) => asked.filter((shardId) => held.includes(shardId)))
        )
      })

    return RunnerStorage.RunnerStorage.of({ ...storage, refresh })
  })

/** effect's SQL runner storage (with its migrations), lock refreshes coalesced. */
export const runnerStorageLayer = Layer.effect(
  RunnerStorage.RunnerStorage,
  Effect.flatMap(RunnerStorage.RunnerStorage, coalesceRefreshes)
).pipe(Layer.provide(SqlRunnerStorage.layer))
