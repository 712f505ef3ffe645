import { assert, describe, it, layer } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { Executions } from "../../src/Orchestrations/Executions.ts"
import { ExecutionWorkflow } from "../../src/Orchestrations/ExecutionWorkflow.ts"
import * as ClusterStorage from "../../src/Runtime/ClusterStorage.ts"
import * as DurableRuns from "../../src/Runtime/DurableRuns.ts"
import { TeamRuns } from "../../src/Teams/TeamRuns.ts"
import { TeamRunWorkflow } from "../../src/Teams/TeamRunWorkflow.ts"
import * as ClusterStarts from "../support/ClusterStarts.ts"
import { awaitRun, startRun, teamOf } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

describe("the version check of the cluster's storage", () => {
  it.effect("the installed effect and its cluster migrations are those our storage was verified with", () =>
    Effect.gen(function* () {
      // Failing here after an upgrade of effect: see "Upgrading effect" in docs/architecture.md.
      assert.deepStrictEqual(yield* ClusterStorage.installed, ClusterStorage.verifiedWith)
      assert.isUndefined(ClusterStorage.mismatch(yield* ClusterStorage.installed, ClusterStorage.verifiedWith))
    })
  )

  it("says what differs", () => {
    const verified = ClusterStorage.verifiedWith
    assert.strictEqual(
      ClusterStorage.mismatch({ ...verified, effect: "4.2.0" }, verified),
      `effect 4.2.0 is installed, this storage was verified with ${verified.effect}`
    )
    assert.include(
      ClusterStorage.mismatch(
        { ...verified, messageMigrations: [...verified.messageMigrations, "0004_new_column"] },
        verified
      ),
      "message storage migrations are [0001_create_tables, 0002_entity_type_size, 0003_pg_messages_rowid_index, 0004_new_column]"
    )
    assert.include(
      ClusterStorage.mismatch({ ...verified, runnerMigrations: [] }, verified),
      "runner storage migrations are []"
    )
  })
})

// The service, told that our storage was verified with another effect than
// the installed one; finished runs' messages due for pruning at once.
const mismatched: ClusterStorage.StorageVersions = { ...ClusterStorage.verifiedWith, effect: "4.0.0" }
const OnEffectsStorage = Layer.mergeAll(Executions.layer, TeamRuns.layer).pipe(
  Layer.provideMerge(
    TestServer.layer({
      executionMessagesRetention: Duration.zero,
      teamRunMessagesRetention: Duration.zero
    })
  ),
  Layer.provide(Layer.succeed(ClusterStorage.VerifiedWith)(mismatched))
)

/** How many messages of the cluster's the workflow `entityId` of `entityType` has stored, and replies to them. */
const storedFor = (entityType: string, entityId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ messages: number; replies: number }>`
      SELECT (SELECT count(*)::int FROM cluster_messages WHERE entity_type = ${entityType} AND entity_id = ${entityId}) AS messages,
             (SELECT count(*)::int FROM cluster_replies WHERE request_id IN
               (SELECT id FROM cluster_messages WHERE entity_type = ${entityType} AND entity_id = ${entityId})) AS replies`
    return row!
  }).pipe(Effect.orDie)

/** Waits (bounded) until the workflow's final reply is stored: the read model says it ended a moment before. */
const replyStored = (entityType: string, entityId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    TestServer.waitFor(
      "the finished workflow's reply",
      storedFor(entityType, entityId).pipe(
        Effect.map((stored) => (stored.replies > 0 ? stored : undefined)),
        Effect.provideService(SqlClient.SqlClient, sql)
      )
    )
  )

describe("effect's own storage, after a version mismatch", () => {
  layer(OnEffectsStorage, { excludeTestServices: true })((it) => {
    it.effect(
      "the service starts on it, and runs an execution and a team run to completion; starts go by the cluster's client, pruning by effect's API",
      () =>
        Effect.gen(function* () {
          const tables = yield* ClusterStorage.ClusterTables
          const installed = yield* ClusterStorage.installed
          assert.deepStrictEqual(tables.storage, {
            _tag: "Effect",
            reason: `effect ${installed.effect} is installed, this storage was verified with 4.0.0`
          })

          const client = yield* TestClient
          const { key, orchestrationId } = yield* TestServer.oneStepOrchestration("local")
          yield* ClusterStarts.shardsHeld
          const before = yield* ClusterStarts.startsCounted("Execution")
          const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
            headers: TestServer.bearer(key),
            body: { input: "fallback" }
          })
          assert.strictEqual(started.status, 202, started.text)
          const executionId = started.body.executionId as string
          const finished = yield* TestServer.waitFor(
            "the execution to complete",
            Effect.map(
              client.request("GET", `/api/v1/executions/${executionId}`, { headers: TestServer.bearer(key) }),
              (read) => (read.body.status === "completed" ? read.body : undefined)
            )
          )
          assert.strictEqual(finished.status, "completed")
          assert.isString(finished.output)
          // On this node's own shard, yet its start was not written with its row.
          const after = yield* ClusterStarts.startsCounted("Execution")
          assert.deepStrictEqual(after, [before[0]!, before[1]! + 1], "started by the cluster's client")

          // effect's own index, untouched.
          const sql = yield* SqlClient.SqlClient
          const indexes = yield* sql<{ name: string; definition: string }>`
          SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'cluster_messages'::regclass`
          const byName = new Map(indexes.map((index) => [index.name, index.definition]))
          assert.match(byName.get("cluster_messages_shard_idx")!, /\(shard_id, processed, last_read, deliver_at\)$/)
          assert.isFalse(byName.has("cluster_messages_entity_idx"))

          // Its messages are pruned through effect's storage.
          const executionEntity = yield* ExecutionWorkflow.executionId({ executionId })
          assert.isAbove((yield* replyStored("Workflow/Execution", executionEntity)).messages, 0)
          assert.strictEqual(yield* (yield* Executions).prune, 1)
          assert.deepStrictEqual(yield* storedFor("Workflow/Execution", executionEntity), { messages: 0, replies: 0 })
          const [marked] = yield* sql<{
            messagesPruned: boolean
          }>`SELECT messages_pruned FROM executions WHERE id = ${executionId}`
          assert.isTrue(marked!.messagesPruned)

          // A team run, likewise.
          const account = yield* TestServer.signUp()
          const teamsKey = (yield* TestServer.createKey(account, ["teams"])).key
          const { team } = yield* teamOf(account, "local", 2)
          const runId = yield* startRun(teamsKey, team.id, "Agree on a name")
          assert.strictEqual((yield* awaitRun(account, team.id, runId)).status, "completed")
          const runEntity = yield* TeamRunWorkflow.executionId({ runId })
          assert.isAbove((yield* replyStored("Workflow/TeamRun", runEntity)).messages, 0)
          assert.strictEqual(yield* DurableRuns.prune((yield* TeamRuns).sweeps), 1)
          assert.deepStrictEqual(yield* storedFor("Workflow/TeamRun", runEntity), { messages: 0, replies: 0 })
        }),
      { timeout: 60_000 }
    )
  })
})
