import * as NodeServices from "@effect/platform-node/NodeServices"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
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
    Effect.gen(function* () {
      const config = yield* AppConfig
      if (Option.isSome(config.databaseUrl)) return config.databaseUrl.value
      const server = yield* Embedded.start({
        dataDir: Option.getOrUndefined(config.embeddedPostgresDataDir),
        port: Option.getOrUndefined(config.embeddedPostgresPort),
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
 * The host, port and database a connection URL names, read as the client
 * reads them (the URL's authority and path, then its `host`, `port` and
 * `dbname` parameters; no database means the user's, as PostgreSQL has
 * it), and passed to the client beside the URL: it connects to the same
 * place either way, but names its SQL spans' `db.namespace`,
 * `server.address` and `server.port` from these options only, and without
 * them every span says `postgres` on `localhost`. A URL it cannot read gives
 * nothing: the client reports it.
 */
export const connectionTarget = (
  url: string
): { readonly host?: string; readonly port?: number; readonly database?: string } => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return {}
  }
  const decode = (value: string) => {
    try {
      return decodeURIComponent(value)
    } catch {
      return undefined
    }
  }
  const portOf = (value: string) => {
    const port = Number(value)
    return Number.isInteger(port) && port >= 1 && port <= 65535 ? port : undefined
  }
  let host =
    parsed.hostname === ""
      ? undefined
      : parsed.hostname.startsWith("[")
        ? parsed.hostname.slice(1, -1)
        : decode(parsed.hostname)
  let port = parsed.port === "" ? undefined : portOf(parsed.port)
  let database = decode(parsed.pathname.replace(/^\//, "")) || undefined
  let user = parsed.username === "" ? undefined : decode(parsed.username)
  for (const [key, value] of parsed.searchParams) {
    if (key === "host") host = value
    else if (key === "port") port = portOf(value)
    else if (key === "dbname") database = value
    else if (key === "user") user = value
  }
  // PostgreSQL's own default, with the client's default user.
  database ??= user ?? process.env.USER ?? process.env.USERNAME
  return {
    ...(host === undefined ? {} : { host }),
    ...(port === undefined ? {} : { port }),
    ...(database === undefined ? {} : { database })
  }
}

/**
 * Bounds shared by every connection: a connection attempt gives up after
 * DATABASE_CONNECT_TIMEOUT, and TCP keepalive (probes after 10 s idle, then
 * Node's 10 probes a second apart) finds a silently dead socket, such as the
 * idle LISTEN connection after a network partition, within about 20 s.
 */
const connectionOptions = Effect.gen(function* () {
  const url = yield* DatabaseUrl
  const config = yield* AppConfig
  return {
    url,
    ...connectionTarget(Redacted.value(url)),
    connectTimeout: config.databaseConnectTimeout,
    keepAlive: Duration.seconds(10),
    ...clientOptions
  }
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
export const ClientLayer = Layer.unwrap(
  Effect.gen(function* () {
    const options = yield* connectionOptions
    const config = yield* AppConfig
    return PgClient.layer({
      ...options,
      maxConnections: config.databasePoolSize,
      multiplex: true,
      multiplexConcurrency: statementsPerConnection,
      startupParameters: statementTimeout(config)
    })
  })
)

/**
 * A small second pool for request counting. Its commits do not wait for the
 * WAL to reach disk (synchronous_commit=off): a count is still atomic and
 * exact, it survives the service being killed, and only a crash of the
 * database machine itself can lose the last fraction of a second of counts.
 */
export class CounterSql extends Context.Service<CounterSql, SqlClient.SqlClient>()("agent-host/CounterSql") {
  static readonly layer = Layer.effect(
    CounterSql,
    Effect.gen(function* () {
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
 * A LISTEN holds its connection: one each for API key revocations, agent,
 * orchestration and tool changes, plan changes, tenant settings, run events
 * (the event streams) and run signals (slots granted, runs cancelled:
 * Runtime/RunSignals.ts). test/Database/Listeners.test.ts names them.
 */
export const listenerConnections = 8

// Room beyond them: a LISTEN the pool cannot give a connection waits for
// ever, and the cache it keeps current is never trusted (every read then goes
// to the database), which nothing else would show.
const listenerPoolSpare = 4

/**
 * Connections of their own for LISTEN: notifications never take a connection
 * from the pool the requests use, and a lost connection is replaced when its
 * listener reconnects.
 */
export class ListenerSql extends Context.Service<ListenerSql, PgClient.PgClient>()("agent-host/ListenerSql") {
  static readonly layer = Layer.effect(
    ListenerSql,
    Effect.gen(function* () {
      const options = yield* connectionOptions
      return yield* PgClient.make({
        ...options,
        maxConnections: listenerConnections + listenerPoolSpare,
        applicationName: "agent-host-listener"
      })
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
export const MigratorLayer = Layer.effectDiscard(
  Effect.scoped(
    Effect.gen(function* () {
      const options = yield* connectionOptions
      const sql = yield* PgClient.make({ ...options, maxConnections: 2, applicationName: "agent-host-migrator" })
      const connection = yield* sql.reserve
      yield* connection.executeRaw("SELECT pg_advisory_lock($1)", [migrationLock])
      yield* PgMigrator.run({ loader: migrations }).pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.ensuring(Effect.ignore(connection.executeRaw("SELECT pg_advisory_unlock($1)", [migrationLock])))
      )
    })
  )
).pipe(Layer.provide([NodeServices.layer, Reactivity.layer]))

/** A migrated database, ready for the repos. */
export const layer = MigratorLayer.pipe(
  Layer.provideMerge(ClientLayer),
  Layer.provideMerge(CounterSql.layer),
  Layer.provideMerge(ListenerSql.layer),
  Layer.provide(DatabaseUrl.layer)
)
