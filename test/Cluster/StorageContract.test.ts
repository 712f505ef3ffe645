import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Option, Redacted } from "effect"
import {
  EntityAddress,
  EntityId,
  EntityType,
  MessageStorage,
  Runner,
  RunnerAddress,
  RunnerStorage,
  ShardId,
  ShardingConfig,
  SqlMessageStorage
} from "effect/cluster"
import { TestClock } from "effect/testing"
import * as ClusterStorage from "../../src/Runtime/ClusterStorage.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// What effect's own message and runner storage guarantee (effect's
// MessageStorage and RunnerStorage contracts), held against both storages the
// service can run on: ours, and effect's own (the fallback). Each test on a
// database of its own.

const Database = Layer.unwrap(
  Effect.gen(function* () {
    const url = yield* TestDatabaseUrl
    return PgClient.layer({ url: Redacted.make(url) })
  })
)

const storages: ReadonlyArray<readonly [string, ClusterStorage.StorageChoice]> = [
  ["ours", { _tag: "Ours" }],
  ["effect's", { _tag: "Effect", reason: "the fallback under test" }]
]

const encodedOf = (choice: ClusterStorage.StorageChoice) =>
  choice._tag === "Ours" ? ClusterStorage.makeEncoded : SqlMessageStorage.makeEncoded()

const shard = { group: "default", id: 3 }
const shardName = "default:3"
const entityType = "Workflow/Contract"

const request = (
  requestId: string,
  entityId: string,
  options: {
    readonly keyed?: boolean
    readonly deliverAt?: number
    readonly tag?: string
    readonly payload?: unknown
  } = {}
) => {
  const tag = options.tag ?? "run"
  return {
    envelope: {
      _tag: "Request" as const,
      requestId,
      address: { shardId: shard, entityType, entityId },
      tag,
      payload: options.payload ?? { n: requestId },
      headers: {}
    },
    primaryKey: options.keyed === false ? null : `${entityType}/${entityId}/${tag}/`,
    deliverAt: options.deliverAt ?? null
  }
}

const exit = (value: unknown) => ({ _tag: "Success", value }) as never

const requestIds = (
  read: ReadonlyArray<{ readonly envelope: { readonly _tag: string; readonly requestId?: string } }>
) =>
  read
    .map((message) => (message.envelope._tag === "Request" ? message.envelope.requestId! : message.envelope._tag))
    .sort()

for (const [name, choice] of storages) {
  describe(`${name} message storage`, () => {
    it.live(
      "stores a request once: its key again is a duplicate, naming the original and its last reply; unkeyed requests are each stored",
      () =>
        Effect.gen(function* () {
          const storage = yield* encodedOf(choice)
          assert.deepStrictEqual(
            yield* storage.saveEnvelope(request("1001", "a")),
            MessageStorage.SaveResultEncoded.Success()
          )
          const again = yield* storage.saveEnvelope(request("1002", "a"))
          assert.strictEqual(again._tag, "Duplicate")
          if (again._tag === "Duplicate") {
            assert.strictEqual(String(again.originalId), "1001")
            assert.isTrue(Option.isNone(again.lastReceivedReply))
          }
          yield* storage.saveReply({ _tag: "WithExit", id: "1003", requestId: "1001", exit: exit("done") })
          const later = yield* storage.saveEnvelope(request("1004", "a"))
          assert.strictEqual(later._tag, "Duplicate")
          if (later._tag === "Duplicate") {
            assert.strictEqual(String(later.originalId), "1001")
            assert.deepStrictEqual(
              Option.map(later.lastReceivedReply, (reply) => [reply._tag, reply.id]),
              Option.some(["WithExit", "1003"])
            )
          }
          // Requests saved together (ours stores them by one statement) each get their own answer.
          const together = yield* Effect.forEach(
            ["b", "c", "a", "d"],
            (entityId, i) => storage.saveEnvelope(request(String(1010 + i), entityId)),
            { concurrency: "unbounded" }
          )
          assert.deepStrictEqual(
            together.map((result) => result._tag),
            ["Success", "Success", "Duplicate", "Success"]
          )

          assert.deepStrictEqual(
            yield* storage.saveEnvelope(request("1020", "e", { keyed: false })),
            MessageStorage.SaveResultEncoded.Success()
          )
          assert.deepStrictEqual(
            yield* storage.saveEnvelope(request("1021", "e", { keyed: false })),
            MessageStorage.SaveResultEncoded.Success()
          )
          // The answered request is processed; the others wait to be read.
          assert.deepStrictEqual(requestIds(yield* storage.unprocessedMessages([shardName], Date.now())), [
            "1010",
            "1011",
            "1013",
            "1020",
            "1021"
          ])
        }).pipe(Effect.provide([Database, NodeCrypto.layerDigest]))
    )

    it.live(
      "replies: chunks are given back until acknowledged; a final reply ends its request; a second final reply fails",
      () =>
        Effect.gen(function* () {
          const storage = yield* encodedOf(choice)
          yield* storage.saveEnvelope(request("2001", "a"))
          yield* storage.saveReply({ _tag: "Chunk", id: "2002", requestId: "2001", sequence: 0, values: [1] })
          assert.deepStrictEqual(
            (yield* storage.repliesFor(["2001"])).map((reply) => reply.id),
            ["2002"]
          )
          // A request with a chunk not yet acknowledged is not read again.
          assert.deepStrictEqual(yield* storage.unprocessedMessages([shardName], Date.now()), [])

          const ack = yield* storage.saveEnvelope({
            envelope: {
              _tag: "AckChunk",
              id: "2003",
              requestId: "2001",
              replyId: "2002",
              address: { shardId: shard, entityType, entityId: "a" }
            },
            primaryKey: null,
            deliverAt: null
          })
          assert.strictEqual(ack._tag, "Success")
          assert.deepStrictEqual(yield* storage.repliesFor(["2001"]), [], "an acknowledged chunk is not given again")
          assert.deepStrictEqual(
            (yield* storage.repliesForUnfiltered(["2001"])).map((reply) => reply.id),
            ["2002"]
          )

          yield* storage.saveReply({ _tag: "WithExit", id: "2004", requestId: "2001", exit: exit({ output: "done" }) })
          const replies = yield* storage.repliesFor(["2001"])
          assert.deepStrictEqual(
            replies.map((reply) => [reply._tag, reply.id]),
            [["WithExit", "2004"]]
          )
          assert.deepStrictEqual(
            replies[0]!._tag === "WithExit" ? replies[0]!.exit : undefined,
            exit({ output: "done" })
          )

          const second = yield* Effect.flip(
            storage.saveReply({ _tag: "WithExit", id: "2005", requestId: "2001", exit: exit("again") })
          )
          assert.strictEqual(second._tag, "PersistenceError")
          assert.deepStrictEqual(
            (yield* storage.repliesFor(["2001"])).map((reply) => reply.id),
            ["2004"]
          )
          assert.deepStrictEqual(yield* storage.unprocessedMessages([shardName], Date.now()), [])
        }).pipe(Effect.provide([Database, NodeCrypto.layerDigest]))
    )

    it.live(
      "unprocessed reads: a message is claimed by one read; a reset gives it again; a later delivery waits; a limit bounds a read",
      () =>
        Effect.gen(function* () {
          const storage = yield* encodedOf(choice)
          const now = Date.now()
          yield* storage.saveEnvelope(request("3001", "a"))
          yield* storage.saveEnvelope(request("3002", "b"))
          yield* storage.saveEnvelope(request("3003", "c", { deliverAt: now + 60_000 }))
          // Another shard's message is not read for this one.
          yield* storage.saveEnvelope({
            ...request("3004", "d"),
            envelope: {
              ...request("3004", "d").envelope,
              address: { shardId: { group: "default", id: 4 }, entityType, entityId: "d" }
            }
          })

          assert.deepStrictEqual(requestIds(yield* storage.unprocessedMessages([shardName], now)), ["3001", "3002"])
          assert.deepStrictEqual(yield* storage.unprocessedMessages([shardName], now), [], "claimed by the first read")
          yield* storage.resetShards([shardName])
          const first = yield* storage.unprocessedMessages([shardName], now, { limit: 1 })
          assert.deepStrictEqual(requestIds(first), ["3001"])
          assert.deepStrictEqual(requestIds(yield* storage.unprocessedMessages([shardName], now)), ["3002"])
          assert.deepStrictEqual(
            requestIds(yield* storage.unprocessedMessages([shardName], now + 120_000)),
            ["3003"],
            "due now"
          )
          yield* storage.resetRequests(["3001" as never])
          assert.deepStrictEqual(requestIds(yield* storage.unprocessedMessagesById(["3001" as never], now)), ["3001"])
          assert.deepStrictEqual(requestIds(yield* storage.unprocessedMessages([shardName], now)), ["3001"])
        }).pipe(Effect.provide([Database, NodeCrypto.layerDigest]))
    )

    it.live("interrupts: a workflow's interrupt is found by its key, also when stored after its start was read", () =>
      Effect.gen(function* () {
        const storage = yield* encodedOf(choice)
        const key = ClusterStorage.interruptKey(entityType, "w")
        yield* storage.saveEnvelope(request("4001", "w"))
        assert.strictEqual((yield* storage.unprocessedMessages([shardName], Date.now())).length, 1)
        const interrupt = {
          envelope: {
            ...request("4002", "w", {
              tag: "deferred",
              payload: { name: "Workflow/InterruptSignal", exit: exit(null) }
            }).envelope
          },
          primaryKey: key,
          deliverAt: null
        }
        assert.strictEqual((yield* storage.saveEnvelope(interrupt))._tag, "Success")
        assert.deepStrictEqual(Option.map(yield* storage.requestIdForPrimaryKey(key), String), Option.some("4002"))
        assert.deepStrictEqual(
          yield* storage.requestIdForPrimaryKey(ClusterStorage.interruptKey(entityType, "other")),
          Option.none()
        )
        // The same interrupt again is a duplicate of the first.
        const again = yield* storage.saveEnvelope({
          ...interrupt,
          envelope: { ...interrupt.envelope, requestId: "4003" }
        })
        assert.strictEqual(again._tag === "Duplicate" ? String(again.originalId) : again._tag, "4002")
      }).pipe(Effect.provide([Database, NodeCrypto.layerDigest]))
    )

    it.live("clearing an entity deletes its messages and their replies, and no other entity's", () =>
      Effect.gen(function* () {
        const storage = yield* encodedOf(choice)
        yield* storage.saveEnvelope(request("5001", "gone"))
        yield* storage.saveReply({ _tag: "WithExit", id: "5002", requestId: "5001", exit: exit("done") })
        yield* storage.saveEnvelope(request("5003", "kept"))
        yield* storage.clearAddress(
          EntityAddress.make({
            shardId: ShardId.make(shard.group, shard.id),
            entityType: EntityType.make(entityType),
            entityId: EntityId.make("gone")
          })
        )
        assert.deepStrictEqual(yield* storage.requestIdForPrimaryKey(`${entityType}/gone/run/`), Option.none())
        assert.deepStrictEqual(yield* storage.repliesForUnfiltered(["5001"]), [])
        assert.deepStrictEqual(
          Option.map(yield* storage.requestIdForPrimaryKey(`${entityType}/kept/run/`), String),
          Option.some("5003")
        )
      }).pipe(Effect.provide([Database, NodeCrypto.layerDigest]))
    )
  })

  describe(`${name} runner storage`, () => {
    const address = RunnerAddress.make("127.0.0.1", 34500)
    const shards = [1, 2, 3].map((id) => ShardId.make("default", id))
    const Storage = ClusterStorage.runnerStorageLayer(choice).pipe(
      Layer.provideMerge(Database),
      Layer.provide(ShardingConfig.layer({ shardLockExpiration: "30 seconds" }))
    )

    it.live("lock refresh confirms the shards still held, not those released; and returns under a test clock", () =>
      Effect.gen(function* () {
        const storage = yield* RunnerStorage.RunnerStorage
        yield* storage.register(Runner.make({ address, groups: ["default"], weight: 1 }), true)
        assert.deepStrictEqual(yield* storage.acquire(address, shards.slice(0, 2)), shards.slice(0, 2))
        assert.deepStrictEqual(yield* storage.refresh(address, shards), shards.slice(0, 2))
        yield* storage.release(address, shards[1]!)
        assert.deepStrictEqual(yield* storage.refresh(address, shards.slice(0, 2)), [shards[0]])
        assert.deepStrictEqual(yield* storage.refresh(address, []), [], "the liveness probe")

        // Bounded on the wall clock: the test clock never moves by itself.
        const wallClockBound = Effect.callback<never, Error>((resume) => {
          const timer = setTimeout(() => resume(Effect.fail(new Error("the refresh did not return within 5 s"))), 5_000)
          return Effect.sync(() => clearTimeout(timer))
        })
        const held = yield* Effect.raceFirst(
          storage.refresh(address, [shards[0]!]).pipe(Effect.provide(TestClock.layer())),
          wallClockBound
        )
        assert.deepStrictEqual(held, [shards[0]])
        yield* storage.releaseAll(address)
        assert.deepStrictEqual(yield* storage.refresh(address, shards), [])
      }).pipe(Effect.provide(Storage))
    )
  })
}
