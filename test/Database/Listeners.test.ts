import { PgClient } from "@effect/sql-pg"
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { settingsChangedChannel } from "../../src/Approvals/Defaults.ts"
import { agentChangedChannel } from "../../src/Agents/Repo.ts"
import { credentialChannel } from "../../src/Auth/Repo.ts"
import { tenantPlanChangedChannel } from "../../src/Billing/Quota.ts"
import { listenerConnections } from "../../src/Database/Sql.ts"
import { runEventsChannel } from "../../src/Http/EventStreamsRepo.ts"
import { orchestrationChangedChannel } from "../../src/Orchestrations/Repo.ts"
import { runSignalsChannel } from "../../src/Runtime/RunSlotsRepo.ts"
import { toolChangedChannel } from "../../src/Tools/Repo.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"

// Every LISTEN of a node gets a connection of its own. One left without (a
// listener pool too small for them) waits for ever, silently: the cache it
// keeps current is never trusted, and every read it would have saved goes to
// the database (for API keys: one more statement per request).

const channels = [
  credentialChannel,
  agentChangedChannel,
  orchestrationChangedChannel,
  toolChangedChannel,
  tenantPlanChangedChannel,
  settingsChangedChannel,
  runEventsChannel,
  runSignalsChannel
]

layer(TestServer.layer(), { excludeTestServices: true })("a node's listeners", (it) => {
  describe("once the service is up", () => {
    it.effect("each channel is listened on, each on a connection of its own", () =>
      Effect.gen(function* () {
        const sql = yield* PgClient.PgClient
        const listened = yield* eventually(
          Effect.map(
            sql<{ query: string }>`SELECT query FROM pg_stat_activity
              WHERE application_name = 'agent-host-listener' AND datname = current_database()
                AND query LIKE 'LISTEN %'`,
            (rows) => {
              const names = rows.map((row) => row.query.replace(/^LISTEN "?([^"]*)"?$/, "$1")).sort()
              assert.deepStrictEqual(names, [...channels].sort())
              return names
            }
          ),
          { timeoutMs: 15_000 }
        )
        assert.strictEqual(listened.length, listenerConnections)
      })
    )
  })
})
