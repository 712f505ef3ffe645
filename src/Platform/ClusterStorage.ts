import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as ClusterError from "effect/cluster/ClusterError"
import * as MessageStorage from "effect/cluster/MessageStorage"
import type * as Reply from "effect/cluster/Reply"
import type * as RunnerAddress from "effect/cluster/RunnerAddress"
import * as RunnerStorage from "effect/cluster/RunnerStorage"
import * as ShardId from "effect/cluster/ShardId"
import * as Snowflake from "effect/cluster/Snowflake"
import * as SqlMessageStorage from "effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "effect/cluster/SqlRunnerStorage"
import * as SqlClient from "effect/sql/SqlClient"
import * as Batcher from "../Database/Batcher.ts"
import { forEachChunk } from "../Database/Chunks.ts"
import { Metrics } from "./Observability.ts"

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
 * - A workflow's start does not wait on its own database round trip. When
 *   a workflow's entity starts, effect's engine looks up whether an
 *   interrupt was stored for it; the cluster starts the entities of the
 *   messages it reads one after the other, so that lookup, one round trip
 *   each, capped how fast stored runs started (measured: about 250 a
 *   second, with the node and the database half idle and thousands of runs
 *   waiting). Here the read that brings the runs' start messages looks up
 *   their interrupts in one statement, and each entity's lookup is answered
 *   from it (`prefetchStartLookups`).
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
 * for the final reply (WithExit) and NULL for a chunk. Final replies that
 * arrive while others are being written are written together by the next
 * statement (Batcher.ts), one commit for all, each caller waiting for its
 * own; if that statement fails (a second final reply for a request breaks
 * the one-exit index), each of its replies is written again on its own, so
 * only the faulty one fails.
 */
export const makeSaveReply = (client: SqlClient.SqlClient): MessageStorage.Encoded["saveReply"] => {
  const sql = client.withoutTransforms()
  const messages = sql("cluster_messages")
  const replies = sql("cluster_replies")
  const saveOne = (reply: Reply.Encoded) =>
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
  type Final = Reply.Encoded & { readonly _tag: "WithExit" }
  // The `IN` list keeps the requests' update on the request_id index even
  // before PostgreSQL has statistics for the table (see beginTogether in
  // Orchestrations/Repo.ts).
  const saveTogether = (finals: ReadonlyArray<Final>) =>
    sql`
      WITH reply (id, request_id, payload) AS (
        VALUES ${sql.csv(finals.map((reply) => sql`(${reply.id}::bigint, ${reply.requestId}::bigint, ${JSON.stringify(reply.exit)})`))}
      ), request AS (
        UPDATE ${messages} m SET processed = TRUE, last_reply_id = reply.id
        FROM reply WHERE m.request_id = reply.request_id AND m.request_id IN ${sql.in(finals.map((reply) => reply.requestId))}
      )
      INSERT INTO ${replies} (id, kind, request_id, payload, sequence)
      SELECT id, 0, request_id, payload, NULL FROM reply
    `.pipe(withTracerDisabled)
  // Each reply's outcome; never called with no replies (Batcher).
  const saveFinals = (finals: ReadonlyArray<Final>) =>
    finals.length === 1
      ? Effect.map(Effect.result(saveOne(finals[0]!)), (result) => [result])
      : saveTogether(finals).pipe(
        Effect.as(finals.map(() => Result.succeed<void>(undefined))),
        Effect.catch(() => Effect.forEach(finals, (reply) => Effect.result(saveOne(reply))))
      )
  const finals = Batcher.make({ write: saveFinals, maxSize: maxSavedTogether })
  return (reply) =>
    reply._tag === "WithExit"
      ? Effect.flatMap(Batcher.inTransaction(client), (alone) =>
        alone ? saveOne(reply) : Effect.flatMap(finals.submit(reply), Effect.fromResult))
      : saveOne(reply)
}

/** The name of the durable deferred by which effect's workflow engine interrupts a workflow. */
const interruptSignal = "Workflow/InterruptSignal"

/** The primary key of a workflow's interrupt, as the engine looks it up when the workflow's entity starts. */
export const interruptKey = (entityType: string, entityId: string) =>
  `${entityType}/${entityId}/deferred/${interruptSignal}`

/** How long a prefetched answer is used; a later lookup goes to the database. */
export const prefetchedFor = Duration.seconds(10)

/** At most this many prefetched answers are kept (the oldest go first). */
const maxPrefetched = 20_000

const lookups = (source: "prefetched" | "database") =>
  Metric.update(Metrics.workflowStartLookups(source), 1)

/**
 * Message storage whose reads of unprocessed messages also look up, in one
 * statement, the interrupt of each workflow they bring a `run` request for;
 * the engine's own lookup when that workflow's entity starts is then answered
 * from it, once, within `prefetchedFor`.
 *
 * The answer is as of the read rather than the entity's start, a moment
 * earlier: an interrupt stored in between is a message to the workflow like
 * any other, read after this one and handled by the started entity, as an
 * interrupt stored just after the engine's own lookup always was.
 */
export const prefetchStartLookups = (
  encoded: MessageStorage.Encoded,
  client: SqlClient.SqlClient,
  ttl: Duration.Duration = prefetchedFor
): MessageStorage.Encoded => {
  const sql = client.withoutTransforms()
  const messages = sql("cluster_messages")
  const ttlMillis = Duration.toMillis(ttl)
  // Insertion order is age order: a key is deleted before it is set again.
  const prefetched = new Map<string, { readonly at: number; readonly id: Option.Option<Snowflake.Snowflake> }>()

  const evict = (now: number) => {
    for (const [key, entry] of prefetched) {
      if (now - entry.at <= ttlMillis && prefetched.size <= maxPrefetched) break
      prefetched.delete(key)
    }
  }

  // Not prepared: a prepared statement is planned for its parameters five
  // times and may then keep a generic plan, chosen while the table was small
  // (a new database): a sequential scan of every message, run again for each
  // read (about 9 ms per read of 50 starts at 20,000 messages, against 0.2 ms
  // by the `message_id` index, which a plan for the actual keys uses).
  // A read brings up to the cluster's batch size (1,024 by default) of
  // starts: their keys are looked up a chunk at a time.
  const prefetch = (keys: ReadonlyArray<string>) =>
    forEachChunk(keys, (chunk) =>
      sql<{ readonly message_id: string; readonly id: bigint }>`
        SELECT message_id, id FROM ${messages} WHERE message_id IN ${sql.in(chunk)}
      `.unprepared
    ).pipe(
      Effect.provideService(SqlClient.SafeIntegers, true),
      Effect.map((chunks) => {
        const now = Date.now()
        const found = new Map(chunks.flat().map((row) => [row.message_id, Snowflake.Snowflake(row.id)]))
        for (const key of keys) {
          prefetched.delete(key)
          prefetched.set(key, { at: now, id: Option.fromNullishOr(found.get(key)) })
        }
        evict(now)
      }),
      ClusterError.PersistenceError.refail,
      withTracerDisabled
    )

  return {
    ...encoded,
    unprocessedMessages: (shardIds, now, options) =>
      Effect.tap(encoded.unprocessedMessages(shardIds, now, options), (read) => {
        const keys: Array<string> = []
        for (const { envelope } of read) {
          if (envelope._tag !== "Request" || envelope.tag !== "run") continue
          if (!envelope.address.entityType.startsWith("Workflow/")) continue
          const key = interruptKey(envelope.address.entityType, envelope.address.entityId)
          // Longer keys are stored hashed: those are looked up as they were.
          if (key.length <= 255) keys.push(key)
        }
        return keys.length === 0 ? Effect.void : prefetch(keys)
      }),
    requestIdForPrimaryKey: (primaryKey) =>
      Effect.suspend(() => {
        const entry = prefetched.get(primaryKey)
        if (entry !== undefined) {
          prefetched.delete(primaryKey)
          if (Date.now() - entry.at <= ttlMillis) return Effect.as(lookups("prefetched"), entry.id)
        }
        return Effect.andThen(lookups("database"), encoded.requestIdForPrimaryKey(primaryKey))
      })
  }
}

/** At most this many requests are stored by one statement. */
export const maxSavedTogether = 200

type Save = Parameters<MessageStorage.Encoded["saveEnvelope"]>[0]
type RequestSave = Save & { readonly envelope: { readonly _tag: "Request" } }

/** A new request's row of `cluster_messages`, as effect's storage writes it (its `envelopeToRow`). */
export const requestRow = ({ deliverAt, envelope, primaryKey }: RequestSave): Record<string, unknown> => ({
  id: envelope.requestId,
  message_id: primaryKey,
  shard_id: ShardId.toString(envelope.address.shardId),
  entity_type: envelope.address.entityType,
  entity_id: envelope.address.entityId,
  kind: 0,
  tag: envelope.tag,
  payload: JSON.stringify(envelope.payload),
  headers: JSON.stringify(envelope.headers),
  trace_id: envelope.traceId ?? null,
  span_id: envelope.spanId ?? null,
  sampled: envelope.sampled ?? null,
  request_id: envelope.requestId,
  reply_id: null,
  deliver_at: deliverAt
})

/**
 * Message storage whose new requests with a primary key (a workflow's start,
 * an activity, a durable deferred) are stored together: those that arrive
 * while one batch is being written are stored by the next, in one INSERT of
 * many rows, one commit (Batcher.ts). Each caller still waits for its own
 * request's commit. The rows are those effect's storage writes (its
 * `envelopeToRow`, for requests); a request whose primary key is already
 * stored (a start sent again) is not inserted, and effect's own save then
 * answers it, as a duplicate with its original id and last reply; so does
 * it each request of a statement that failed.
 */
export const batchRequestSaves = (encoded: MessageStorage.Encoded, client: SqlClient.SqlClient): MessageStorage.Encoded => {
  const sql = client.withoutTransforms()
  const messages = sql("cluster_messages")
  // Never called with no saves (Batcher).
  const insert = (saves: ReadonlyArray<RequestSave>) =>
    sql<{ readonly id: string }>`
      INSERT INTO ${messages} ${sql.insert(saves.map(requestRow) as [Record<string, unknown>, ...Array<Record<string, unknown>>])}
      ON CONFLICT (message_id) DO NOTHING
      RETURNING id::text AS id
    `.pipe(
      Effect.map((rows) => {
        const inserted = new Set(rows.map((row) => row.id))
        return saves.map((save) => inserted.has(save.envelope.requestId))
      }),
      // A statement that fails (a row the table refuses, the database gone)
      // leaves each of its requests to effect's own save: only a faulty one
      // fails, and each caller sees its own error.
      Effect.catch(() => Effect.succeed(saves.map(() => false))),
      withTracerDisabled
    )
  const batcher = Batcher.make({ write: insert, maxSize: maxSavedTogether })
  return {
    ...encoded,
    saveEnvelope: (save) => {
      const { envelope, primaryKey } = save
      // Longer keys are stored hashed by effect's storage: those are saved by it.
      if (envelope._tag !== "Request" || primaryKey === null || primaryKey.length > 255) return encoded.saveEnvelope(save)
      return Effect.flatMap(Batcher.inTransaction(client), (alone) =>
        alone ? encoded.saveEnvelope(save) : Effect.flatMap(
          batcher.submit({ ...save, envelope }),
          (inserted) => inserted ? Effect.succeed(MessageStorage.SaveResultEncoded.Success()) : encoded.saveEnvelope(save)
        ))
    }
  }
}

/**
 * effect's SQL message storage (its tables made by its migrations), each
 * reply saved in one statement and workflow starts' lookups prefetched.
 */
export const messageStorageLayer = Layer.effect(
  MessageStorage.MessageStorage,
  Effect.gen(function*() {
    const client = yield* SqlClient.SqlClient
    const encoded = batchRequestSaves(prefetchStartLookups(yield* SqlMessageStorage.makeEncoded(), client), client)
    return yield* MessageStorage.makeEncoded({ ...encoded, saveReply: makeSaveReply(client) })
  })
).pipe(Layer.provide(Snowflake.layerGenerator))

/**
 * Deletes the stored messages, and their replies, of these entities of
 * `entityType`: finished workflows whose outcome the feature keeps in its own
 * tables. A chunk of at most 1,000 entity ids per transaction, so any number
 * of ids can be given; a chunk that fails fails the call and leaves the
 * chunks before it deleted (deleting again is harmless). Returns how many
 * messages were deleted.
 */
export const deleteEntityMessages = (
  client: SqlClient.SqlClient,
  entityType: string,
  entityIds: ReadonlyArray<string>
) => {
  const sql = client.withoutTransforms()
  const messages = sql("cluster_messages")
  const replies = sql("cluster_replies")
  return forEachChunk(entityIds, (chunk) =>
    Effect.gen(function*() {
      yield* sql`DELETE FROM ${replies} WHERE request_id IN (
                   SELECT id FROM ${messages} WHERE entity_type = ${entityType} AND entity_id IN ${sql.in(chunk)})`
      const deleted = yield* sql<{ readonly n: number }>`
        WITH gone AS (DELETE FROM ${messages} WHERE entity_type = ${entityType} AND entity_id IN ${sql.in(chunk)} RETURNING 1)
        SELECT count(*)::int AS n FROM gone`
      return deleted[0]?.n ?? 0
    }).pipe(sql.withTransaction)).pipe(Effect.map((counts) => counts.reduce((total, n) => total + n, 0)))
}

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
