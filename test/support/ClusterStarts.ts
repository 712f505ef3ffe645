import { assert } from "@effect/vitest"
import { Effect } from "effect"
import * as EntityId from "effect/cluster/EntityId"
import * as Sharding from "effect/cluster/Sharding"
import { SqlClient } from "effect/sql"
import { eventually } from "./Eventually.ts"
import { sample } from "./Prometheus.ts"
import { TestClient } from "./TestServer.ts"

// The start requests of durable runs (executions, team runs) as the cluster
// stores them in `cluster_messages`: those stored with their runs' rows
// (ClusterStorage.startMessage) are compared with those the cluster's client
// stores.

/** Waits until this single node holds every shard (bounded). */
export const shardsHeld = Effect.flatMap(Sharding.Sharding, (sharding) =>
  eventually(
    Effect.suspend(() =>
      sharding.hasShardId(sharding.getShardId(EntityId.make("any"), "default"))
        ? Effect.void
        : Effect.die(new Error("this node does not hold its shards yet"))
    )
  )
)

/** `workflow_starts_total` of `workflow`: how many starts were stored with their rows, and by the client. */
export const startsCounted = (workflow: string) =>
  Effect.map(
    Effect.flatMap(TestClient, (client) => client.request("GET", "/metrics")),
    (metrics) =>
      ["with_row", "by_client"].map(
        (stored) => sample(metrics.text, "workflow_starts_total", { workflow, stored }) ?? 0
      )
  )

/** The stored start request of each of these runs of `workflow`, by run id (the payload's `field`). */
export const startsOf = (workflow: string, field: string, ids: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql.withoutTransforms()<Record<string, unknown>>`
      SELECT * FROM cluster_messages WHERE entity_type = ${`Workflow/${workflow}`} AND tag = 'run'
        AND payload IN ${sql.in(ids.map((id) => JSON.stringify({ [field]: id })))}`
    return new Map(rows.map((row) => [JSON.parse(row.payload as string)[field] as string, row]))
  })

// What differs from one request to the next.
const perRequest = [
  "id",
  "rowid",
  "message_id",
  "shard_id",
  "entity_id",
  "payload",
  "request_id",
  "last_reply_id",
  "last_read",
  "trace_id",
  "span_id"
]

/**
 * The start of `ownId` (stored with its row) is the row the cluster's client
 * stored for `clientsId`, column by column, but for what is each request's own,
 * once both are processed (bounded).
 */
export const assertStoredAsClientStores = (workflow: string, field: string, ownId: string, clientsId: string) =>
  Effect.gen(function* () {
    const sharding = yield* Sharding.Sharding
    // A run's own row reaches its end before the cluster marks its start
    // message processed (with the workflow's reply): wait, bounded, for both.
    const stored = yield* eventually(
      Effect.flatMap(startsOf(workflow, field, [ownId, clientsId]), (stored) =>
        stored.get(ownId)?.processed && stored.get(clientsId)?.processed
          ? Effect.succeed(stored)
          : Effect.die(new Error(`the start requests of ${ownId} and ${clientsId} are not both processed yet`))
      )
    )
    const own = stored.get(ownId)
    const clients = stored.get(clientsId)
    assert.isDefined(own)
    assert.isDefined(clients)
    const shared = (row: Record<string, unknown>) =>
      Object.fromEntries(Object.entries(row).filter(([column]) => !perRequest.includes(column)))
    assert.deepStrictEqual(shared(own!), shared(clients!))
    assert.deepStrictEqual(Object.keys(own!).sort(), Object.keys(clients!).sort())
    for (const [row, id] of [
      [own!, ownId],
      [clients!, clientsId]
    ] as const) {
      const shardId = sharding.getShardId(EntityId.make(row.entity_id as string), "default")
      assert.strictEqual(row.message_id, `Workflow/${workflow}/${row.entity_id}/run/`)
      assert.strictEqual(row.request_id, row.id)
      assert.strictEqual(row.payload, JSON.stringify({ [field]: id }))
      // Each request's own span of the client (ids of a span that was recorded here).
      assert.match(row.trace_id as string, /^[0-9a-f]{32}$/)
      assert.match(row.span_id as string, /^[0-9a-f]{16}$/)
      assert.strictEqual(row.shard_id, `default:${shardId.id}`)
      assert.isTrue(sharding.hasShardId(shardId))
    }
    return { own: own!, clients: clients! }
  })
