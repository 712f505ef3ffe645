import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Deferred, Duration, Effect, Fiber, Layer, Option, Redacted } from "effect"
import {
  MessageStorage,
  Runner,
  RunnerAddress,
  RunnerStorage,
  ShardId,
  ShardingConfig,
  SqlMessageStorage,
  SqlRunnerStorage
} from "effect/cluster"
import { SqlClient } from "effect/sql"
import * as ClusterStorage from "../../src/Platform/ClusterStorage.ts"
import { TestDatabaseUrl, waitFor } from "../support/TestServer.ts"

// effect's SQL storages on a database of this file's own, as the service uses them.
const StorageLayer = Layer.unwrap(Effect.gen(function*() {
  const url = yield* TestDatabaseUrl
  return Layer.mergeAll(SqlRunnerStorage.layer, Layer.effectDiscard(SqlMessageStorage.makeEncoded())).pipe(
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url) })),
    Layer.provide([ShardingConfig.layer({ shardLockExpiration: "30 seconds" }), NodeCrypto.layerDigest])
  )
}))

const address = RunnerAddress.make("127.0.0.1", 34431)
const shards = Array.from({ length: 40 }, (_, i) => ShardId.make("default", i + 1))

describe("cluster storage", () => {
  it.live(
    "lock confirmations asked for while a refresh is in flight are all answered by the next one, each with its own shard",
    () =>
      Effect.gen(function*() {
        const base = yield* RunnerStorage.RunnerStorage
        yield* base.register(Runner.make({ address, groups: ["default"], weight: 1 }), true)
        const held = shards.slice(0, 30)
        assert.deepStrictEqual((yield* base.acquire(address, held)).length, held.length)

        // The first refresh is held until every other confirmation has been asked for.
        const gate = yield* Deferred.make<void>()
        const calls: Array<ReadonlyArray<ShardId.ShardId>> = []
        const counted = RunnerStorage.RunnerStorage.of({
          ...base,
          refresh: (runner, shardIds) =>
            Effect.suspend(() => {
              const asked = Array.from(shardIds)
              calls.push(asked)
              return Effect.andThen(calls.length === 1 ? Deferred.await(gate) : Effect.void, base.refresh(runner, asked))
            })
        })
        const storage = yield* ClusterStorage.coalesceRefreshes(counted)

        let asked = 0
        const confirm = (shardId: ShardId.ShardId) =>
          Effect.suspend(() => {
            asked++
            return storage.refresh(address, [shardId])
          })
        const first = yield* Effect.forkChild(confirm(shards[0]!))
        yield* waitFor("the first refresh", Effect.sync(() => calls.length === 1 || undefined))
        // Shards 2..30 are held, 31..40 are not.
        const rest = yield* Effect.forkChild(
          Effect.forEach(shards.slice(1), confirm, { concurrency: "unbounded" })
        )
        yield* waitFor("every confirmation asked", Effect.sync(() => asked === shards.length || undefined))
        assert.strictEqual(calls.length, 1, "nothing else refreshes while the first is in flight")
        yield* Deferred.succeed(gate, undefined)

        assert.deepStrictEqual(yield* Fiber.join(first), [shards[0]])
        const answers = yield* Fiber.join(rest)
        assert.deepStrictEqual(answers, shards.slice(1).map((shardId, i) => i + 1 < held.length ? [shardId] : []))
        assert.strictEqual(calls.length, 2, "the 39 confirmations asked during the first refresh share the second")
        assert.strictEqual(calls[1]!.length, shards.length - 1)

        // A lone confirmation later is a refresh of its own; an empty one is the liveness probe.
        assert.deepStrictEqual(yield* storage.refresh(address, [shards[5]!]), [shards[5]])
        assert.strictEqual(calls.length, 3)
        assert.deepStrictEqual(yield* storage.refresh(address, []), [])
        yield* base.releaseAll(address)
        assert.deepStrictEqual(yield* storage.refresh(address, [shards[5]!]), [], "a released lock is not confirmed")
      }).pipe(Effect.provide(StorageLayer))
  )

  it.live("lock confirmations asked for within the gather window share one refresh", () =>
    Effect.gen(function*() {
      const base = yield* RunnerStorage.RunnerStorage
      yield* base.register(Runner.make({ address, groups: ["default"], weight: 1 }), true)
      const held = shards.slice(0, 10)
      assert.deepStrictEqual((yield* base.acquire(address, held)).length, held.length)
      const calls: Array<ReadonlyArray<ShardId.ShardId>> = []
      const counted = RunnerStorage.RunnerStorage.of({
        ...base,
        refresh: (runner, shardIds) => {
          calls.push(Array.from(shardIds))
          return base.refresh(runner, shardIds)
        }
      })
      // A window long enough that every confirmation below is asked within it.
      const storage = yield* ClusterStorage.coalesceRefreshes(counted, Duration.seconds(1))
      const answers = yield* Effect.forEach(
        shards.slice(0, 20),
        (shardId, i) => Effect.andThen(Effect.sleep(Duration.millis(i * 5)), storage.refresh(address, [shardId])),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(answers, shards.slice(0, 20).map((shardId, i) => i < held.length ? [shardId] : []))
      assert.strictEqual(calls.length, 1, "one refresh for the 20 confirmations")
      assert.strictEqual(calls[0]!.length, 20)
      yield* base.releaseAll(address)
    }).pipe(Effect.provide(StorageLayer)))

  it.live("a reply and the mark on its request are written together, or not at all", () =>
    Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const saveReply = ClusterStorage.makeSaveReply(yield* SqlClient.SqlClient)
      const request = "9001"
      yield* sql`
        INSERT INTO cluster_messages (id, message_id, shard_id, entity_type, entity_id, kind, tag, payload, headers, request_id)
        VALUES (${request}, 'test/run', 'default:1', 'Workflow/Test', 'e1', 0, 'run', '{}', '{}', ${request})
      `
      const message = sql<{ processed: boolean; last_reply_id: string | null }>`
        SELECT processed, last_reply_id::text FROM cluster_messages WHERE id = ${request}
      `
      const replies = sql<{ id: string; kind: number | null; payload: string }>`
        SELECT id::text, kind, payload FROM cluster_replies WHERE request_id = ${request} ORDER BY id
      `

      yield* saveReply({ _tag: "Chunk", id: "9002", requestId: request, sequence: 0, values: [{ n: 1 }] })
      assert.deepStrictEqual(yield* message, [{ processed: false, last_reply_id: "9002" }])

      const exit = { _tag: "Success", value: { output: "done" } }
      yield* saveReply({ _tag: "WithExit", id: "9003", requestId: request, exit: exit as never })
      assert.deepStrictEqual(yield* message, [{ processed: true, last_reply_id: "9003" }])
      assert.deepStrictEqual(yield* replies, [
        { id: "9002", kind: null, payload: JSON.stringify([{ n: 1 }]) },
        { id: "9003", kind: 0, payload: JSON.stringify(exit) }
      ])

      // A second final reply breaks the one-exit index: it fails, and the request still names the first.
      const second = yield* Effect.flip(saveReply({ _tag: "WithExit", id: "9004", requestId: request, exit: exit as never }))
      assert.strictEqual(second._tag, "PersistenceError")
      assert.deepStrictEqual(yield* message, [{ processed: true, last_reply_id: "9003" }])
      assert.deepStrictEqual((yield* replies).map((reply) => reply.id), ["9002", "9003"])
    }).pipe(Effect.provide(StorageLayer)))

  it.live("the interrupt lookups of workflows starting are answered from the read of their start messages", () =>
    Effect.gen(function*() {
      const client = yield* SqlClient.SqlClient
      const sql = client.withoutTransforms()
      yield* sql`DELETE FROM cluster_messages WHERE shard_id = 'default:7'`
      const insert = (id: number, messageId: string, entityId: string, tag: string) =>
        sql`
          INSERT INTO cluster_messages (id, message_id, shard_id, entity_type, entity_id, kind, tag, payload, headers, request_id)
          VALUES (${String(id)}, ${messageId}, 'default:7', 'Workflow/Execution', ${entityId}, 0, ${tag}, '{}', '{}', ${String(id)})
        `
      // Two runs; the first was interrupted before it started.
      yield* insert(7001, "Workflow/Execution/run-a/run/", "run-a", "run")
      yield* insert(7002, "Workflow/Execution/run-b/run/", "run-b", "run")
      yield* insert(7003, ClusterStorage.interruptKey("Workflow/Execution", "run-a"), "run-a", "deferred")

      const base = yield* SqlMessageStorage.makeEncoded()
      const asked: Array<string> = []
      const counted: MessageStorage.Encoded = {
        ...base,
        requestIdForPrimaryKey: (primaryKey) => {
          asked.push(primaryKey)
          return base.requestIdForPrimaryKey(primaryKey)
        }
      }
      const storage = ClusterStorage.prefetchStartLookups(counted, client, Duration.millis(300))
      const keyA = ClusterStorage.interruptKey("Workflow/Execution", "run-a")
      const keyB = ClusterStorage.interruptKey("Workflow/Execution", "run-b")

      const read = yield* storage.unprocessedMessages(["default:7"], Date.now())
      assert.deepStrictEqual(read.map((message) => message.envelope._tag === "Request" ? message.envelope.tag : "").sort(), [
        "deferred",
        "run",
        "run"
      ])
      assert.deepStrictEqual(Option.map(yield* storage.requestIdForPrimaryKey(keyA), String), Option.some("7003"))
      assert.deepStrictEqual(yield* storage.requestIdForPrimaryKey(keyB), Option.none())
      assert.deepStrictEqual(asked, [], "both answered from the read")

      // Each answer is used once; the next lookup is the database's, and gives the same.
      assert.deepStrictEqual(Option.map(yield* storage.requestIdForPrimaryKey(keyA), String), Option.some("7003"))
      assert.deepStrictEqual(asked, [keyA])

      // An answer older than its time to live is not used.
      yield* sql`UPDATE cluster_messages SET last_read = NULL WHERE shard_id = 'default:7'`
      yield* storage.unprocessedMessages(["default:7"], Date.now())
      yield* Effect.sleep(Duration.millis(400))
      assert.deepStrictEqual(yield* storage.requestIdForPrimaryKey(keyB), Option.none())
      assert.deepStrictEqual(asked, [keyA, keyB])
      yield* sql`DELETE FROM cluster_messages WHERE shard_id = 'default:7'`
    }).pipe(Effect.provide([StorageLayer, NodeCrypto.layerDigest])))
})
