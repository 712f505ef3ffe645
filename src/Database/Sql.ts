import * as NodeServices from "@effect/platform-node/NodeServices"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as String from "effect/String"
import * as Reactivity from "effect/reactivity/Reactivity"
import * as SqlClient from "effect/sql/SqlClient"
import { AppConfig } from "../Config.ts"
import * as Embedded from "./Embedded.ts"
import { migrations } from "./migrations/index.ts"

/** Where the database is: DATABASE_URL, or the embedded server started for this process. */
export class DatabaseUrl extends Context.Service<DatabaseUrl, Redacted.Redacted<string>>()("agent-host/DatabaseUrl") {
  static readonly layer = Layer.effect(
    DatabaseUrl,
    Effect.gen(function*() {
      const config = yield* AppConfig
      if (Option.isSome(config.databaseUrl)) return config.databaseUrl.value
      const server = yield* Embedded.start({
        dataDir: Option.getOrUndefined(config.embeddedPostgresDataDir),
        port: config.embeddedPostgresPort,
        osUser: config.embeddedPostgresUser
      })
      return server.url
    })
  )
}

// Only column names are renamed: JSON values (steps, variables, event data)
// are the user's and round-trip exactly as given.
const clientOptions = {
  applicationName: "agent-host",
  transformResultNames: String.snakeToCamel,
  transformQueryNames: String.camelToSnake,
  transformJson: false
}

/**
 * Bounds shared by every connection: a connection attempt gives up after
 * DATABASE_CONNECT_TIMEOUT, and TCP keepalive (probes after 10 s idle, then
 * Node's 10 probes a second apart) finds a silently dead socket, such as the
 * idle LISTEN connection after a network partition, within about 20 s.
 */
const connectionOptions = Effect.gen(function*() {
  const url = yield* DatabaseUrl
  const config = yield* AppConfig
  return { url, connectTimeout: config.databaseConnectTimeout, keepAlive: Duration.seconds(10), ...clientOptions }
})

// A statement never runs longer than DATABASE_STATEMENT_TIMEOUT, so a request
// waiting on the database is bounded even when Postgres is stuck.
const statementTimeout = (config: { readonly databaseStatementTimeout: Duration.Duration }) => ({
  statement_timeout: `${Math.max(1, Math.round(Duration.toMillis(config.databaseStatementTimeout)))}`
})

/**
 * How many statements outside a transaction share one connection of the
 * pool, pipelined: statements issued in the same tick go out in one write and
 * Postgres answers them back to back. Fewer socket writes and round trips per
 * request (measured: about a third less CPU per key-authenticated list).
 * Transactions and LISTEN still hold a connection of their own. A statement
 * on a shared connection is not cancelled when its caller gives up: it runs
 * to its end or to DATABASE_STATEMENT_TIMEOUT.
 */
export const statementsPerConnection = 16

/** The Postgres client. Columns are snake_case in SQL and camelCase in rows. */
export const ClientLayer = Layer.unwrap(Effect.gen(function*() {
  const options = yield* connectionOptions
  const config = yield* AppConfig
  return PgClient.layer({
    ...options,
    maxConnections: config.databasePoolSize,
    multiplex: true,
    multiplexConcurrency: statementsPerConnection,
    startupParameters: statementTimeout(config)
  })
}))

/**
 * A small second pool for request counting. Its commits do not wait for the
 * WAL to reach disk (synchronous_commit=off): a count is still atomic and
 * exact, it survives the service being killed, and only a crash of the
 * database machine itself can lose the last fraction of a second of counts.
 */
export class CounterSql extends Context.Service<CounterSql, SqlClient.SqlClient>()("agent-host/CounterSql") {
  static readonly layer = Layer.effect(
    CounterSql,
    Effect.gen(function*() {
      const options = yield* connectionOptions
      const config = yield* AppConfig
      return yield* PgClient.make({
        ...options,
        maxConnections: 4,
        startupParameters: { synchronous_commit: "off", ...statementTimeout(config) }
      })
    })
  ).pipe(Layer.provide(Reactivity.layer))
}

/**
 * A LISTEN holds its connection: one each for API key revocations, agent
 * changes, orchestration changes, plan changes, run events (the event streams)
 * and run signals (slots granted, runs cancelled: Platform/RunSignals.ts).
 */
export const listenerConnections = 6

/**
 * Connections of their own for LISTEN: notifications never take a connection
 * from the pool the requests use, and a lost connection is replaced when its
 * listener reconnects.
 */
export class ListenerSql extends Context.Service<ListenerSql, PgClient.PgClient>()("agent-host/ListenerSql") {
  static readonly layer = Layer.effect(
    ListenerSql,
    Effect.gen(function*() {
      const options = yield* connectionOptions
      return yield* PgClient.make({ ...options, maxConnections: listenerConnections, applicationName: "agent-host-listener" })
    })
  ).pipe(Layer.provide(Reactivity.layer))
}

// Any constant shared by every node: the advisory lock that serialises migrations.
const migrationLock = 0x61676e74

/**
 * Applies pending migrations at start. Nodes starting together against a new
 * database take turns under an advisory lock, so only the first creates the
 * schema and the others find it done. Migrations run on a client of their
 * own, without the statement timeout: waiting for another node's migrations
 * or rewriting a large table may take longer.
 */
export const MigratorLayer = Layer.effectDiscard(Effect.scoped(Effect.gen(function*() {
  const options = yield* connectionOptions
  const sql = yield* PgClient.make({ ...options, maxConnections: 2, applicationName: "agent-host-migrator" })
  const connection = yield* sql.reserve
  yield* connection.executeRaw("SELECT pg_advisory_lock($1)", [migrationLock])
  yield* PgMigrator.run({ loader: migrations }).pipe(
    Effect.provideService(SqlClient.SqlClient, sql),
    Effect.ensuring(Effect.ignore(connection.executeRaw("SELECT pg_advisory_unlock($1)", [migrationLock])))
  )
}))).pipe(Layer.provide([NodeServices.layer, Reactivity.layer]))

/** A migrated database, ready for the repos. */
export const layer = MigratorLayer.pipe(
  Layer.provideMerge(ClientLayer),
  Layer.provideMerge(CounterSql.layer),
  Layer.provideMerge(ListenerSql.layer),
  Layer.provide(DatabaseUrl.layer)
)

/**
 * Indexes on the cluster's own message table, made once the cluster has made
 * its tables rather than as migrations (see Platform/Cluster.ts):
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
 *   as long as the poll itself ran (2.5 against 0.9 ms a poll).
 * Built without blocking writes by whichever node takes the try-lock; an
 * invalid leftover of a build cut short is rebuilt. Failures are logged: the
 * next start tries again.
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

export const indexClusterMessages = Effect.gen(function*() {
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
      ([row]) => row === undefined ? undefined : { text: row[0] as string, valid: row[1] === true }
    )
  yield* Effect.gen(function*() {
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
      yield* connection.executeRaw(`ALTER TABLE cluster_messages ALTER COLUMN shard_id SET STATISTICS ${shardStatisticsTarget}`, [])
    }
    const swapped = isWaitingIndex((yield* definition("cluster_messages_shard_idx"))?.text)
    yield* Effect.forEach(clusterMessageIndexes, ([name, index]) =>
      Effect.gen(function*() {
        if (name === "cluster_messages_waiting_idx" && swapped) return
        const existing = yield* definition(name)
        if (existing?.valid === true) return
        if (existing !== undefined) yield* connection.executeRaw(`DROP INDEX CONCURRENTLY IF EXISTS ${name}`, [])
        yield* connection.executeRaw(`CREATE INDEX CONCURRENTLY IF NOT EXISTS ${name} ${index}`, [])
      }))
    if (!swapped) {
      // Dropping effect's index takes the table's lock for a moment: at most
      // 5 s of waiting for it, or the next start tries again.
      yield* connection.executeRaw("BEGIN", [])
      yield* Effect.gen(function*() {
        yield* connection.executeRaw("SET LOCAL lock_timeout = '5s'", [])
        yield* connection.executeRaw("DROP INDEX IF EXISTS cluster_messages_shard_idx", [])
        yield* connection.executeRaw("ALTER INDEX cluster_messages_waiting_idx RENAME TO cluster_messages_shard_idx", [])
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
