import { assert, describe, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Fiber, Option } from "effect"
import { Reactivity } from "effect/reactivity"
import { AppConfig } from "../../src/Config.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// A statement past DATABASE_STATEMENT_TIMEOUT is the database not serving:
// a bounded 503 with Retry-After, never a 500 or a hang.
describe("a statement that runs past the statement timeout", () => {
  layer(TestServer.layer({ databaseStatementTimeout: Duration.seconds(1) }), { excludeTestServices: true })((it) => {
    it.effect("answers 503 problem+json with Retry-After within the bound, and the next request succeeds", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const config = yield* AppConfig
        const account = yield* TestServer.signUp()
        const auth = TestServer.bearer(account.token)
        assert.strictEqual((yield* client.request("GET", "/api/agents", { headers: auth })).status, 200)

        // Another session holds the agents table locked: reading it waits on the
        // lock (a page this node has not kept yet: its first read is kept).
        const sql = yield* PgClient.make({ url: Option.getOrThrow(config.databaseUrl), maxConnections: 1 }).pipe(
          Effect.provide(Reactivity.layer)
        )
        const startedAt = Date.now()
        const blocked = yield* Effect.gen(function* () {
          yield* sql`LOCK TABLE agents IN ACCESS EXCLUSIVE MODE`
          return yield* client.request("GET", "/api/agents?limit=7", { headers: auth })
        }).pipe(sql.withTransaction, Effect.orDie, Effect.forkChild)
        const response = yield* Fiber.join(blocked)
        assert.strictEqual(response.status, 503, response.text)
        assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
        assert.strictEqual(response.headers.get("retry-after"), "5")
        assert.isBelow(Date.now() - startedAt, 10_000)

        assert.strictEqual((yield* client.request("GET", "/api/agents?limit=7", { headers: auth })).status, 200)
      })
    )
  })
})
