import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Layer, Option, Redacted, Scope } from "effect"
import { SqlMessageStorage, SqlRunnerStorage } from "effect/cluster"
import { SqlClient } from "effect/sql"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import type { TestProject } from "vitest/node"
import { AppConfig } from "../../src/Config.ts"
import * as Embedded from "../../src/Database/Embedded.ts"
import * as Sql from "../../src/Database/Sql.ts"

declare module "vitest" {
  export interface ProvidedContext {
    /** Admin URL of the test PostgreSQL; each test file creates its own database in it. */
    databaseUrl: string
    /** A database migrated once for this run, which each test file's database is a copy of. */
    templateDatabase: string
  }
}

/** A port nobody listens on right now (the kernel picks it). */
const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = Net.createServer()
    server.once("error", reject)
    server.listen({ host: "127.0.0.1", port: 0 }, () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

const adminStatement = (adminUrl: string, statement: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe(statement)
  }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(adminUrl) })))

/**
 * A new database with every migration applied, the service's and those of
 * effect's cluster storage (which the service runs at start), made once so
 * that each test file copies it (CREATE DATABASE ... TEMPLATE) rather than
 * migrating a database of its own. Its name is this run's own: runs of
 * several checkouts may share one PostgreSQL. Nothing stays connected to it,
 * and nothing can connect later: a copy fails while anyone is connected to
 * its template.
 */
const makeTemplate = (adminUrl: string) =>
  Effect.gen(function* () {
    const name = `test_template_${Crypto.randomBytes(6).toString("hex")}`
    yield* adminStatement(adminUrl, `CREATE DATABASE ${name}`)
    const url = new URL(adminUrl)
    url.pathname = `/${name}`
    // The service's own migrator and client, as it migrates at start.
    const config = AppConfig.layerWith({ databaseUrl: Option.some(Redacted.make(url.toString())) })
    const database = Layer.provide(Sql.DatabaseUrl.layer, config)
    yield* Effect.gen(function* () {
      yield* Layer.build(Sql.MigratorLayer).pipe(Effect.provide([database, config]), Effect.scoped)
      yield* Layer.build(
        Layer.mergeAll(SqlMessageStorage.layerMigrations({}), SqlRunnerStorage.layerMigrations({}))
      ).pipe(Effect.provide(Sql.ClientLayer.pipe(Layer.provide([database, config]))), Effect.scoped)
      yield* adminStatement(adminUrl, `ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS false`)
    }).pipe(
      Effect.onError(() => Effect.ignore(adminStatement(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)))
    )
    return name
  })

/**
 * One PostgreSQL for the whole run: TEST_DATABASE_URL when set, otherwise an
 * embedded server in a fresh temp directory, stopped and deleted on teardown;
 * in it, the template database of this run, dropped on teardown.
 */
export default async function setup(project: TestProject) {
  const external = process.env.TEST_DATABASE_URL
  if (external) {
    const template = await Effect.runPromise(makeTemplate(external))
    project.provide("databaseUrl", external)
    project.provide("templateDatabase", template)
    return () =>
      Effect.runPromise(Effect.ignore(adminStatement(external, `DROP DATABASE IF EXISTS ${template} WITH (FORCE)`)))
  }

  const root = await Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-host-test-"))
  // mkdtemp makes it 0700; as root the server runs as another OS user who must enter it.
  await Fs.chmod(root, 0o755)
  const scope = Effect.runSync(Scope.make())
  const teardown = async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await Fs.rm(root, { recursive: true, force: true })
  }

  try {
    const server = await Effect.runPromise(
      Embedded.start({
        dataDir: Path.join(root, "postgres"),
        port: await freePort(),
        osUser: process.env.EMBEDDED_POSTGRES_USER ?? "postgres"
      }).pipe(Scope.provide(scope))
    )
    // Dropped with the server's directory.
    const template = await Effect.runPromise(makeTemplate(Redacted.value(server.url)))
    project.provide("databaseUrl", Redacted.value(server.url))
    project.provide("templateDatabase", template)
  } catch (error) {
    await teardown()
    throw error
  }

  return teardown
}
