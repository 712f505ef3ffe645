import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import type * as Digest from "effect/crypto/Digest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as ClusterError from "effect/cluster/ClusterError"
import * as ClusterSchema from "effect/cluster/ClusterSchema"
import * as EntityAddress from "effect/cluster/EntityAddress"
import * as EntityId from "effect/cluster/EntityId"
import * as EntityType from "effect/cluster/EntityType"
import * as Envelope from "effect/cluster/Envelope"
import * as MessageStorage from "effect/cluster/MessageStorage"
import type * as Reply from "effect/cluster/Reply"
import type * as RunnerAddress from "effect/cluster/RunnerAddress"
import * as RunnerStorage from "effect/cluster/RunnerStorage"
import * as Sharding from "effect/cluster/Sharding"
import type * as ShardingConfig from "effect/cluster/ShardingConfig"
import * as ShardId from "effect/cluster/ShardId"
import * as Snowflake from "effect/cluster/Snowflake"
import * as SqlMessageStorage from "effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "effect/cluster/SqlRunnerStorage"
import effectPackage from "effect/package.json" with { type: "json" }
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import type * as Statement from "effect/sql/Statement"
import type * as Workflow from "effect/workflow/Workflow"
import * as Batcher from "../Database/Batcher.ts"
import { forEachChunk } from "../Database/Chunks.ts"
import { Metrics } from "../Observability/Observability.ts"

/**
 * The one module that touches effect cluster's tables (`cluster_messages`,
 * `cluster_replies`, `cluster_runners`, `cluster_locks`): every statement on
 * them and every piece of effect's storage reimplemented here. No feature
 * does; features ask `ClusterTables` (below). What depends on effect's
 * internals is listed in docs/architecture.md, with the checklist for
 * upgrading effect.
 *
 * At start (`choose`) the installed effect and its cluster migrations are
 * compared with those this storage was verified with (`verifiedWith`); on a
 * mismatch, or with CLUSTER_STORAGE=effect, the cluster runs on effect's own
 * SQL storage, unchanged, and the features' fast paths fall back to effect's
 * public API (a workflow's start sent by the cluster's client, pruning by
 * `MessageStorage.clearAddress`, effect's own indexes).
 *
 * Our storage is effect's SQL storage, with fewer statements per workflow
 * where it spends the most.
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
 * - A run's start message is written by the statement that stores the run's
 *   row (`startMessage`, `storedWithStarts`); finished runs' messages are
 *   deleted (`ClusterTables.pruneMessages`); the message table has indexes
 *   of ours (`indexClusterMessages`).
 */

// --- the version check ------------------------------------------------------

/** What the storage below depends on: effect's version and its cluster storages' migrations. */
export interface StorageVersions {
  readonly effect: string
  /** `SqlMessageStorage.migrations()`, as `<id>_<name>` (`cluster_migrations`). */
  readonly messageMigrations: ReadonlyArray<string>
  /** `SqlRunnerStorage.migrations()`, as `<id>_<name>` (`cluster_runner_migrations`). */
  readonly runnerMigrations: ReadonlyArray<string>
}

/**
 * The versions this storage was checked against (docs/architecture.md,
 * "Upgrading effect"): its tables' columns, its statements' meaning, the
 * engine's keys and lookups.
 */
export const verifiedWith: StorageVersions = {
  effect: "4.1.0",
  messageMigrations: ["0001_create_tables", "0002_entity_type_size", "0003_pg_messages_rowid_index"],
  runnerMigrations: ["0001_create_tables"]
}

/** What `choose` compares the installed effect with; a test may give another to start on effect's storage. */
export const VerifiedWith = Context.Reference<StorageVersions>("agent-host/ClusterStorage/VerifiedWith", {
  defaultValue: () => verifiedWith
})

const migrationIds = (loader: Effect.Effect<ReadonlyArray<readonly [number, string, unknown]>, unknown>) =>
  Effect.map(Effect.orDie(loader), (migrations) =>
    migrations.map(([id, name]) => `${String(id).padStart(4, "0")}_${name}`)
  )

/** The installed effect's version and cluster migrations. */
export const installed: Effect.Effect<StorageVersions> = Effect.gen(function* () {
  return {
    effect: effectPackage.version,
    messageMigrations: yield* migrationIds(SqlMessageStorage.migrations()),
    runnerMigrations: yield* migrationIds(SqlRunnerStorage.migrations({}))
  }
})

/** Why `found` is not what was verified, or undefined when it is. */
export const mismatch = (found: StorageVersions, verified: StorageVersions): string | undefined => {
  const reasons: Array<string> = []
  if (found.effect !== verified.effect) {
    reasons.push(`effect ${found.effect} is installed, this storage was verified with ${verified.effect}`)
  }
  const same = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) =>
    a.length === b.length && a.every((id, i) => id === b[i])
  if (!same(found.messageMigrations, verified.messageMigrations)) {
    reasons.push(
      `effect's message storage migrations are [${found.messageMigrations.join(", ")}], verified [${verified.messageMigrations.join(", ")}]`
    )
  }
  if (!same(found.runnerMigrations, verified.runnerMigrations)) {
    reasons.push(
      `effect's runner storage migrations are [${found.runnerMigrations.join(", ")}], verified [${verified.runnerMigrations.join(", ")}]`
    )
  }
  return reasons.length === 0 ? undefined : reasons.join("; ")
}

/** CLUSTER_STORAGE: `auto` uses ours when effect is the verified one; `effect` always uses effect's own. */
export type StorageSetting = "auto" | "effect"

/** Which storage the cluster runs on, and why effect's when it does. */
export type StorageChoice = { readonly _tag: "Ours" } | { readonly _tag: "Effect"; readonly reason: string }

/** Compares the installed effect with `VerifiedWith` (unless `setting` is `effect`), and logs a fallback and why. */
export const choose = (setting: StorageSetting): Effect.Effect<StorageChoice> =>
  Effect.gen(function* () {
    if (setting === "effect") {
      yield* Effect.logInfo("The cluster runs on effect's own SQL storage (CLUSTER_STORAGE=effect)")
      return { _tag: "Effect", reason: "CLUSTER_STORAGE=effect" } as const
    }
    const reason = mismatch(yield* installed, yield* VerifiedWith)
    if (reason === undefined) return { _tag: "Ours" } as const
    yield* Effect.logWarning(
      `The cluster runs on effect's own SQL storage, without this service's faster statements: ${reason}. ` +
        'See "Upgrading effect" in docs/architecture.md.'
    )
    return { _tag: "Effect", reason } as const
  })

// --- message storage --------------------------------------------------------

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
  // Orchestrations/ExecutionsRepo.ts).
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
          alone ? saveOne(reply) : Effect.flatMap(finals.submit(reply), Effect.fromResult)
        )
      : saveOne(reply)
}

/**
 * The name of the durable deferred by which effect's workflow engine
 * interrupts a workflow (its `InterruptSignal`, not exported).
 */
const interruptSignal = "Workflow/InterruptSignal"

// The key names no shard: effect's `primaryKeyByAddress` reads only the entity's type and id.
const anyShard = ShardId.make("default", 0)

/** The primary key of a workflow's interrupt, as the engine looks it up when the workflow's entity starts. */
export const interruptKey = (entityType: string, entityId: string) =>
  Envelope.primaryKeyByAddress({
    address: EntityAddress.make({
      shardId: anyShard,
      entityType: EntityType.make(entityType),
      entityId: EntityId.make(entityId)
    }),
    tag: "deferred",
    id: interruptSignal
  })

const interruptSuffix = `/deferred/${interruptSignal}`

/**
 * How long a prefetched answer is used; a later lookup goes to the database
 * (as correct, one round trip slower). The cluster starts a read's entities
 * right after the read, so an answer is normally used within moments of it;
 * this bounds how old an answer may be when an interrupt was stored by
 * another node and not yet read here.
 */
export const prefetchedFor = Duration.seconds(2)

/** At most this many prefetched answers are kept (the oldest go first). */
const maxPrefetched = 20_000

const lookups = (source: "prefetched" | "database") => Metric.update(Metrics.workflowStartLookups(source), 1)

/**
 * Message storage whose reads of unprocessed messages also look up, in one
 * statement, the interrupt of each workflow they bring a `run` request for;
 * the engine's own lookup when that workflow's entity starts is then answered
 * from it, once, within `ttl`.
 *
 * The answer is as of the read rather than the entity's start, a moment
 * earlier. An interrupt stored in between is a message to the workflow like
 * any other, handled by the started entity; and the answer is not used once
 * it may be stale: an interrupt this node stores, or reads (one stored by
 * another node), drops its workflow's answer, and a prefetch that was in
 * flight meanwhile keeps none of its answers. A prefetch that fails keeps
 * none either: the read still gives what it claimed (effect's read has
 * already marked those messages read, and would not give them again for ten
 * minutes), and the lookups go to the database.
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
  // Counts interrupts stored or read here: a prefetch during which it moved may have missed one.
  let interruptsSeen = 0

  const evict = (now: number) => {
    for (const [key, entry] of prefetched) {
      if (now - entry.at <= ttlMillis && prefetched.size <= maxPrefetched) break
      prefetched.delete(key)
    }
  }

  const forget = (key: string) => {
    prefetched.delete(key)
    interruptsSeen++
  }

  // Not prepared: a prepared statement is planned for its parameters five
  // times and may then keep a generic plan, chosen while the table was small
  // (a new database): a sequential scan of every message, run again for each
  // read, where a plan for the actual keys uses the `message_id` index.
  // A read brings up to the cluster's batch size (1,024 by default) of
  // starts: their keys are looked up a chunk at a time.
  const prefetch = (keys: ReadonlyArray<string>) =>
    Effect.suspend(() => {
      const seenBefore = interruptsSeen
      return forEachChunk(
        keys,
        (chunk) =>
          sql<{ readonly message_id: string; readonly id: bigint }>`
          SELECT message_id, id FROM ${messages} WHERE message_id IN ${sql.in(chunk)}
        `.unprepared
      ).pipe(
        Effect.provideService(SqlClient.SafeIntegers, true),
        Effect.map((chunks) => {
          if (interruptsSeen !== seenBefore) return
          const now = Date.now()
          const found = new Map(chunks.flat().map((row) => [row.message_id, Snowflake.Snowflake(row.id)]))
          for (const key of keys) {
            prefetched.delete(key)
            prefetched.set(key, { at: now, id: Option.fromNullishOr(found.get(key)) })
          }
          evict(now)
        }),
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.failCause(cause as Cause.Cause<never>)
            : Effect.andThen(
                Effect.sync(() => keys.forEach((key) => prefetched.delete(key))),
                Effect.logWarning(
                  "Could not look up the interrupts of workflows starting; each is looked up on its own",
                  cause
                )
              )
        ),
        withTracerDisabled
      )
    })

  // The interrupt signals among messages read here drop their workflows' answers.
  const forgetSignals = (read: ReadonlyArray<{ readonly envelope: Envelope.Encoded }>) => {
    for (const { envelope } of read) {
      if (envelope._tag !== "Request" || envelope.tag !== "deferred") continue
      if (!envelope.address.entityType.startsWith("Workflow/")) continue
      if ((envelope.payload as { readonly name?: unknown } | null)?.name !== interruptSignal) continue
      forget(interruptKey(envelope.address.entityType, envelope.address.entityId))
    }
  }

  return {
    ...encoded,
    saveEnvelope: (save) => {
      const key = save.primaryKey
      if (key === null || !key.endsWith(interruptSuffix)) return encoded.saveEnvelope(save)
      // Forgotten before the save and again once it is stored: a prefetch
      // that read before the commit either ended before (its answer goes
      // now) or ends after, and then keeps nothing.
      return Effect.suspend(() => {
        forget(key)
        return encoded.saveEnvelope(save)
      }).pipe(Effect.ensuring(Effect.sync(() => forget(key))))
    },
    unprocessedMessages: (shardIds, now, options) =>
      Effect.tap(encoded.unprocessedMessages(shardIds, now, options), (read) => {
        forgetSignals(read)
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
    unprocessedMessagesById: (ids, now) =>
      Effect.tap(encoded.unprocessedMessagesById(ids, now), (read) => Effect.sync(() => forgetSignals(read))),
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
export const batchRequestSaves = (
  encoded: MessageStorage.Encoded,
  client: SqlClient.SqlClient
): MessageStorage.Encoded => {
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
      if (envelope._tag !== "Request" || primaryKey === null || primaryKey.length > 255)
        return encoded.saveEnvelope(save)
      return Effect.flatMap(Batcher.inTransaction(client), (alone) =>
        alone
          ? encoded.saveEnvelope(save)
          : Effect.flatMap(batcher.submit({ ...save, envelope }), (inserted) =>
              inserted ? Effect.succeed(MessageStorage.SaveResultEncoded.Success()) : encoded.saveEnvelope(save)
            )
      )
    }
  }
}

/**
 * Our message storage, as effect's encoded storage: effect's SQL storage (its
 * tables made by its migrations), requests with a key stored together, each
 * reply saved in one statement, and workflow starts' lookups prefetched.
 */
export const makeEncoded = Effect.gen(function* () {
  const client = yield* SqlClient.SqlClient
  const encoded = prefetchStartLookups(batchRequestSaves(yield* SqlMessageStorage.makeEncoded(), client), client)
  return { ...encoded, saveReply: makeSaveReply(client) } satisfies MessageStorage.Encoded
})

/**
 * Our message storage, plus the indexes our use of it needs
 * (`indexClusterMessages`), built in the background once effect has made its
 * tables.
 */
const ourMessageStorage = Layer.effect(
  MessageStorage.MessageStorage,
  Effect.gen(function* () {
    const storage = yield* MessageStorage.makeEncoded(yield* makeEncoded)
    yield* Effect.forkScoped(indexClusterMessages)
    return storage
  })
).pipe(Layer.provide(Snowflake.layerGenerator))

/** The cluster's message storage: ours, or effect's own, unchanged. */
export const messageStorageLayer = (
  choice: StorageChoice
): Layer.Layer<
  MessageStorage.MessageStorage,
  never,
  SqlClient.SqlClient | ShardingConfig.ShardingConfig | Digest.Digest
> => (choice._tag === "Ours" ? ourMessageStorage : SqlMessageStorage.layer)

// --- start messages ---------------------------------------------------------

/** A workflow's start request as a row of `cluster_messages`, for `storedWithStarts`. */
export interface StartMessage {
  readonly row: Readonly<Record<string, unknown>>
}

/**
 * The start request of a workflow whose shard this node holds, as the row of
 * `cluster_messages` the cluster's client would have stored for it (effect's
 * `envelopeToRow`, its key effect's `primaryKeyByAddress`), for the run's own
 * insert to store with the run's row in one statement (`storedWithStarts`).
 * `undefined` when another node holds the shard (or none does yet): the
 * cluster's client then stores the request and tells that node, as before.
 * Once the row is committed, `sharding.pollStorage` has this node read it,
 * as the client's local send does.
 */
export const startMessage = <W extends Workflow.Any>(sharding: Sharding.Sharding["Service"], workflow: W) => {
  const entityType = EntityType.make(`Workflow/${workflow._tag}`)
  const shardGroup = Context.get(workflow.annotations, ClusterSchema.ShardGroup)
  const encode = Schema.encodeSync(
    Schema.toCodecJson(workflow.payloadSchema) as unknown as Schema.Codec<unknown, unknown>
  )
  return (payload: W["payloadSchema"]["Type"]): Effect.Effect<StartMessage | undefined> =>
    Effect.gen(function* () {
      const entityId = EntityId.make(yield* workflow.executionId(payload))
      const shardId = sharding.getShardId(entityId, shardGroup(entityId))
      if (!sharding.hasShardId(shardId)) return undefined
      const requestId = String(yield* sharding.getSnowflake)
      // The span the client would open for the request: the run continues its trace.
      const span = yield* Effect.useSpan(
        `${entityType}.client.run`,
        {
          kind: "client",
          attributes: { "rpc.system.name": "effect_rpc", "rpc.method": "run" }
        },
        Effect.succeed
      )
      // The workflow entity's `run` request has the empty primary key.
      const primaryKey = Envelope.primaryKeyByAddress({
        address: EntityAddress.make({ shardId, entityType, entityId }),
        tag: "run",
        id: ""
      })
      return {
        row: requestRow({
          envelope: {
            _tag: "Request",
            requestId,
            address: { shardId, entityType, entityId },
            tag: "run",
            payload: encode(payload),
            headers: {},
            traceId: span.traceId,
            spanId: span.spanId,
            sampled: span.sampled
          },
          primaryKey,
          deliverAt: null
        })
      }
    })
}

/**
 * `stored` (an INSERT of a feature's rows, RETURNING what it needs) with
 * these start messages inserted by the same statement, so each run and its
 * start are committed together. The feature's `sql`, whose row transforms
 * `stored` expects.
 */
export const storedWithStarts = <A extends object>(
  sql: SqlClient.SqlClient,
  stored: Statement.Statement<A>,
  starts: ReadonlyArray<StartMessage>
): Statement.Statement<A> =>
  starts.length === 0
    ? stored
    : sql<A>`WITH stored AS (${stored}),
    started AS (INSERT INTO cluster_messages ${sql.insert(starts.map((start) => start.row) as [Record<string, unknown>, ...Array<Record<string, unknown>>])})
    SELECT * FROM stored`

// --- pruning ----------------------------------------------------------------

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
) =>
  forEachChunk(entityIds, (chunk) => deleteChunk(client, entityType, chunk).pipe(client.withTransaction)).pipe(
    Effect.map((counts) => counts.reduce((total, n) => total + n, 0))
  )

// The two statements; in the caller's transaction.
const deleteChunk = (client: SqlClient.SqlClient, entityType: string, entityIds: ReadonlyArray<string>) => {
  const sql = client.withoutTransforms()
  const messages = sql("cluster_messages")
  const replies = sql("cluster_replies")
  return Effect.gen(function* () {
    yield* sql`DELETE FROM ${replies} WHERE request_id IN (
                 SELECT id FROM ${messages} WHERE entity_type = ${entityType} AND entity_id IN ${sql.in(entityIds)})`
    const deleted = yield* sql<{ readonly n: number }>`
      WITH gone AS (DELETE FROM ${messages} WHERE entity_type = ${entityType} AND entity_id IN ${sql.in(entityIds)} RETURNING 1)
      SELECT count(*)::int AS n FROM gone`
    return deleted[0]?.n ?? 0
  })
}

// --- indexes ----------------------------------------------------------------

/**
 * Indexes on the cluster's own message table, made once the cluster has made
 * its tables rather than as migrations:
 * - `cluster_messages_shard_idx` is effect's name, but ours is a partial index
 *   of the messages still waiting, by shard and age: every query of effect's
 *   that names shards also asks for unprocessed messages. Effect's own index
 *   of that name (shard, processed, last_read, deliver_at) held every message
 *   ever stored, and named `last_read`, which each poll sets on the messages
 *   it reads: no such update could be heap-only. Effect makes its index only
 *   if none of that name exists, so ours takes its place: built beside it,
 *   then swapped in one short transaction.
 * - pruning a finished execution's messages finds them by entity id.
 * - the table's pages are filled to 70%, leaving room on a message's page for
 *   the poll's update of it.
 * - `shard_id` keeps statistics of 10 values rather than PostgreSQL's 100:
 *   effect's poll names every shard of the node (300 on one node) as
 *   literals, and planning it compared each with every common value kept,
 *   which took as long as the poll itself.
 * Built without blocking writes by whichever node takes the try-lock; an
 * invalid leftover of a build cut short is rebuilt. Failures are logged: the
 * next start tries again. Without them every poll for unprocessed messages
 * (each node, every second) reads the whole message table, so it costs more
 * the longer the service has run.
 */
const waitingIndex = "ON cluster_messages (shard_id, rowid) WHERE NOT processed"
const clusterMessageIndexes = [
  ["cluster_messages_waiting_idx", waitingIndex],
  ["cluster_messages_entity_idx", "ON cluster_messages (entity_id)"]
] as const
/** How many common values of `shard_id` PostgreSQL keeps (see above). */
const shardStatisticsTarget = 10
/** Our index before it took effect's name; no longer needed beside it. */
const replacedIndex = "cluster_messages_unprocessed_idx"

/** Whether `definition` (pg_get_indexdef) is our index of waiting messages. */
export const isWaitingIndex = (definition: string | undefined) =>
  definition !== undefined && /\(shard_id, rowid\) WHERE \(NOT processed\)$/.test(definition)

export const indexClusterMessages = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const connection = yield* sql.reserve
  // Any fixed pair of numbers: the lock only keeps two nodes from building the indexes at once.
  const [locked] = yield* connection.executeValues("SELECT pg_try_advisory_lock(4242, 1)", [])
  if (locked?.[0] !== true) return
  // Building an index on a large table may take longer than the statement
  // timeout; the connection goes back to the pool with its defaults restored.
  yield* connection.executeRaw("SET statement_timeout = 0", [])
  yield* Effect.addFinalizer(() => Effect.ignore(connection.executeRaw("RESET statement_timeout", [])))
  const definition = (name: string) =>
    Effect.map(
      connection.executeValues(
        `SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = '${name}'`,
        []
      ),
      ([row]) => (row === undefined ? undefined : { text: row[0] as string, valid: row[1] === true })
    )
  yield* Effect.gen(function* () {
    const [fill] = yield* connection.executeValues(
      "SELECT coalesce('fillfactor=70' = ANY (reloptions), false) FROM pg_class WHERE relname = 'cluster_messages'",
      []
    )
    if (fill?.[0] !== true) yield* connection.executeRaw("ALTER TABLE cluster_messages SET (fillfactor = 70)", [])
    const [target] = yield* connection.executeValues(
      "SELECT attstattarget FROM pg_attribute WHERE attrelid = 'cluster_messages'::regclass AND attname = 'shard_id'",
      []
    )
    if (Number(target?.[0]) !== shardStatisticsTarget) {
      yield* connection.executeRaw(
        `ALTER TABLE cluster_messages ALTER COLUMN shard_id SET STATISTICS ${shardStatisticsTarget}`,
        []
      )
    }
    const swapped = isWaitingIndex((yield* definition("cluster_messages_shard_idx"))?.text)
    yield* Effect.forEach(clusterMessageIndexes, ([name, index]) =>
      Effect.gen(function* () {
        if (name === "cluster_messages_waiting_idx" && swapped) return
        const existing = yield* definition(name)
        if (existing?.valid === true) return
        if (existing !== undefined) yield* connection.executeRaw(`DROP INDEX CONCURRENTLY IF EXISTS ${name}`, [])
        yield* connection.executeRaw(`CREATE INDEX CONCURRENTLY IF NOT EXISTS ${name} ${index}`, [])
      })
    )
    if (!swapped) {
      // Dropping effect's index takes the table's lock for a moment: at most
      // 5 s of waiting for it, or the next start tries again.
      yield* connection.executeRaw("BEGIN", [])
      yield* Effect.gen(function* () {
        yield* connection.executeRaw("SET LOCAL lock_timeout = '5s'", [])
        yield* connection.executeRaw("DROP INDEX IF EXISTS cluster_messages_shard_idx", [])
        yield* connection.executeRaw(
          "ALTER INDEX cluster_messages_waiting_idx RENAME TO cluster_messages_shard_idx",
          []
        )
        yield* connection.executeRaw("COMMIT", [])
      }).pipe(Effect.onError(() => Effect.ignore(connection.executeRaw("ROLLBACK", []))))
    }
    // What a start cut short between the build and the swap may have left.
    if (swapped) yield* connection.executeRaw("DROP INDEX CONCURRENTLY IF EXISTS cluster_messages_waiting_idx", [])
    yield* connection.executeRaw(`DROP INDEX CONCURRENTLY IF EXISTS ${replacedIndex}`, [])
  }).pipe(Effect.ensuring(Effect.ignore(connection.executeRaw("SELECT pg_advisory_unlock(4242, 1)", []))))
}).pipe(
  Effect.scoped,
  Effect.catchCause((cause) => Effect.logWarning("Could not build the indexes of cluster messages", cause))
)

// --- runner storage ---------------------------------------------------------

interface PendingRefresh {
  readonly address: RunnerAddress.RunnerAddress
  readonly shards: Set<ShardId.ShardId>
  readonly done: Deferred.Deferred<Array<ShardId.ShardId>, ClusterError.PersistenceError>
}

/**
 * Waits on the wall clock, not effect's: the window is a matter of the
 * process's own timing, and under a test clock (which moves only when told)
 * a confirmation would otherwise never return.
 */
const wallClockSleep = (duration: Duration.Duration) =>
  Effect.callback<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), Duration.toMillis(duration))
    return Effect.sync(() => clearTimeout(timer))
  })

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
  Effect.gen(function* () {
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
    const gathered = Effect.andThen(wallClockSleep(gather), drain).pipe(
      Effect.onInterrupt(() => Effect.suspend(() => (next === undefined ? Effect.void : Deferred.interrupt(next.done))))
    )

    // Starts the drain unless it runs; the flag and the fork are one step, so
    // an interrupted caller cannot leave the flag set with nothing draining.
    const ensureDraining = Effect.uninterruptible(
      Effect.suspend(() => {
        if (running) return Effect.void
        running = true
        return Effect.asVoid(Effect.forkIn(gathered, scope, { startImmediately: true }))
      })
    )

    const sameAddress = (a: RunnerAddress.RunnerAddress, b: RunnerAddress.RunnerAddress) =>
      a.host === b.host && a.port === b.port

    const refresh: RunnerStorage.RunnerStorage["Service"]["refresh"] = (address, shardIds) =>
      Effect.suspend(() => {
        const asked = Array.from(shardIds)
        if (asked.length === 0) return storage.refresh(address, asked)
        // Only this node's own address is ever refreshed; anything else is not gathered.
        if (next !== undefined && !sameAddress(next.address, address)) return storage.refresh(address, asked)
        const batch = (next ??= { address, shards: new Set(), done: Deferred.makeUnsafe() })
        for (const shardId of asked) batch.shards.add(shardId)
        return Effect.andThen(ensureDraining, Deferred.await(batch.done)).pipe(
          Effect.map((held) => asked.filter((shardId) => held.includes(shardId)))
        )
      })

    return RunnerStorage.RunnerStorage.of({ ...storage, refresh })
  })

/** effect's SQL runner storage (with its migrations), lock refreshes coalesced. */
const ourRunnerStorage = Layer.effect(
  RunnerStorage.RunnerStorage,
  Effect.flatMap(RunnerStorage.RunnerStorage, coalesceRefreshes)
).pipe(Layer.provide(SqlRunnerStorage.layer))

/** The cluster's runner storage: ours, or effect's own, unchanged. */
export const runnerStorageLayer = (
  choice: StorageChoice
): Layer.Layer<RunnerStorage.RunnerStorage, SqlError, SqlClient.SqlClient | ShardingConfig.ShardingConfig> =>
  choice._tag === "Ours" ? ourRunnerStorage : SqlRunnerStorage.layer

// --- what features use ------------------------------------------------------

/** The workflow a feature's runs are, as `ClusterTables` needs it. */
type AnyWorkflow = Workflow.Any

/**
 * What features do with the cluster's tables, on whichever storage the
 * cluster runs: on ours, the statements above; on effect's own, its public
 * API only.
 */
export class ClusterTables extends Context.Service<
  ClusterTables,
  {
    readonly storage: StorageChoice
    /**
     * `startMessage` for this node's runs of `workflow`: with effect's own
     * storage, always `undefined` (the cluster's client sends every start).
     */
    readonly startMessage: <W extends AnyWorkflow>(
      workflow: W
    ) => (payload: W["payloadSchema"]["Type"]) => Effect.Effect<StartMessage | undefined>
    /**
     * Deletes the stored messages and replies of these finished workflows
     * (their entity ids), then runs `mark` (the feature records them pruned):
     * on our storage in one transaction; on effect's, by its `clearAddress`,
     * each entity's in a transaction of its own, then `mark`.
     */
    readonly pruneMessages: <E, R>(
      workflow: AnyWorkflow,
      entityIds: ReadonlyArray<string>,
      mark: Effect.Effect<unknown, E, R>
    ) => Effect.Effect<void, E | SqlError | ClusterError.PersistenceError, R>
    /** Deletes the stored messages and replies of these finished workflows, a chunk at a time. */
    readonly deleteMessages: (
      workflow: AnyWorkflow,
      entityIds: ReadonlyArray<string>
    ) => Effect.Effect<void, SqlError | ClusterError.PersistenceError>
  }
>()("agent-host/ClusterTables") {
  /** Over the cluster's sharding and message storage, as `choose` chose them. */
  static readonly layer = (storage: StorageChoice) =>
    Layer.effect(
      ClusterTables,
      Effect.gen(function* () {
        const client = yield* SqlClient.SqlClient
        const sharding = yield* Sharding.Sharding
        const messageStorage = yield* MessageStorage.MessageStorage
        const entityType = (workflow: AnyWorkflow) => `Workflow/${workflow._tag}`
        if (storage._tag === "Ours") {
          return ClusterTables.of({
            storage,
            startMessage: (workflow) => startMessage(sharding, workflow),
            pruneMessages: (workflow, entityIds, mark) =>
              Effect.andThen(
                forEachChunk(entityIds, (chunk) => deleteChunk(client, entityType(workflow), chunk)),
                mark
              ).pipe(client.withTransaction, Effect.asVoid),
            deleteMessages: (workflow, entityIds) =>
              Effect.asVoid(deleteEntityMessages(client, entityType(workflow), entityIds))
          })
        }
        const clear = (workflow: AnyWorkflow, entityIds: ReadonlyArray<string>) => {
          const shardGroup = Context.get(workflow.annotations, ClusterSchema.ShardGroup)
          const type = EntityType.make(entityType(workflow))
          return Effect.forEach(
            entityIds,
            (id) => {
              const entityId = EntityId.make(id)
              return messageStorage.clearAddress(
                EntityAddress.make({
                  shardId: sharding.getShardId(entityId, shardGroup(entityId)),
                  entityType: type,
                  entityId
                })
              )
            },
            { discard: true }
          )
        }
        return ClusterTables.of({
          storage,
          startMessage: () => () => Effect.succeed(undefined),
          pruneMessages: (workflow, entityIds, mark) => Effect.andThen(clear(workflow, entityIds), Effect.asVoid(mark)),
          deleteMessages: clear
        })
      })
    )
}
