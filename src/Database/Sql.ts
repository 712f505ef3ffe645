import { NodeServices } from "@effect/platform-node"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Effect, Layer, Option, String } from "effect"
import { AppConfig } from "../Config.ts"
import * as Embedded from "./Embedded.ts"
import { migrations } from "./migrations/index.ts"

/**
 * The Postgres client: DATABASE_URL when set, otherwise an embedded server
 * under EMBEDDED_POSTGRES_DATA_DIR. Columns are snake_case in SQL and
 * camelCase in rows.
 */
export const ClientLayer = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  const url = Option.isSome(config.databaseUrl)
    ? config.databaseUrl.value
    : (yield* Embedded.start({
      dataDir: config.embeddedPostgresDataDir,
      port: config.embeddedPostgresPort,
      osUser: config.embeddedPostgresUser
    })).url
  return PgClient.layer({
    url,
    maxConnections: config.databasePoolSize,
    applicationName: "agent-host",
    transformResultNames: String.snakeToCamel,
    transformQueryNames: String.camelToSnake
  })
}))

/** Applies pending migrations at start; safe to run from several nodes at once (the migrator locks its table). */
export const MigratorLayer = PgMigrator.layer({ loader: migrations }).pipe(
  Layer.provide(NodeServices.layer)
)

/** A migrated database, ready for the repos. */
export const layer = MigratorLayer.pipe(Layer.provideMerge(ClientLayer))
