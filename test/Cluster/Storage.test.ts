import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Context, Deferred, Duration, Effect, Fiber, Layer, Option, Redacted } from "effect"
import { TestClock } from "effect/testing"
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
import * as ClusterStorage from "../../src/Runtime/ClusterStorage.ts"
import { EmptyDatabaseUrl, TestDatabaseUrl, waitFor } from "../support/TestServer.ts"

// effect's SQL storages on a database of this file's own, as the service uses them.
const StorageLayer = Layer.unwrap(
  Effect.gen(function* () {
    const url = yield* TestDatabaseUrl
    return Layer.mergeAll(SqlRunnerStorage.layer, Layer.effectDiscard(SqlMessageStorage.makeEncoded())).pipe(
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url) })),
      Layer.provide([ShardingConfig.layer({ shardLockExpiration: "30 seconds" }), NodeCrypto.layerDigest])
    )
  })
)

const address = RunnerAddress.make("127.0.0.1", 34431)
const shards = Array.from({ length: 40 }, (_, i) => ShardId.make("default", i + 1))

describe("cluster storage", () => {
  it.live(
    "lock confirmations asked for while a refresh is in flight are all answered by the next one, each with its own shard",
    () =>
      Effect.gen(function* () {
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
              return Effect.andThen(
                calls.length === 1 ? Deferred.await(gate) : Effect.void,
                base.refresh(runner, asked)
              )
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
        yield* waitFor(
          "the first refresh",
          Effect.sync(() => calls.length === 1 || undefined)
        )
        // Shards 2..30 are held, 31..40 are not.
        const rest = yield* Effect.forkChild(Effect.forEach(shards.slice(1), confirm, { concurrency: "unbounded" }))
        yield* waitFor(
          "every confirmation asked",
          Effect.sync(() => asked === shards.length || undefined)
        )
        assert.strictEqual(calls.length, 1, "nothing else refreshes while the first is in flight")
        yield* Deferred.succeed(gate, undefined)

        assert.deepStrictEqual(yield* Fiber.join(first), [shards[0]])
        const answers = yield* Fiber.join(rest)
        assert.deepStrictEqual(
          answers,
          shards.slice(1).map((shardId, i) => (i + 1 < held.length ? [shardId] : []))
        )
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
    Effect.gen(function* () {
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
      assert.deepStrictEqual(
        answers,
        shards.slice(0, 20).map((shardId, i) => (i < held.length ? [shardId] : []))
      )
      assert.strictEqual(calls.length, 1, "one refresh for the 20 confirmations")
      assert.strictEqual(calls[0]!.length, 20)
      yield* base.releaseAll(address)
    }).pipe(Effect.provide(StorageLayer))
  )

  it.live("a reply and the mark on its request are written together, or not at all", () =>
    Effect.gen(function* () {
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
      const second = yield* Effect.flip(
        saveReply({ _tag: "WithExit", id: "9004", requestId: request, exit: exit as never })
      )
      assert.strictEqual(second._tag, "PersistenceError")
      assert.deepStrictEqual(yield* message, [{ processed: true, last_reply_id: "9003" }])
      assert.deepStrictEqual(
        (yield* replies).map((reply) => reply.id),
        ["9002", "9003"]
      )
    }).pipe(Effect.provide(StorageLayer))
  )

  it.live("the interrupt lookups of workflows starting are answered from the read of their start messages", () =>
    Effect.gen(function* () {
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
      assert.deepStrictEqual(
        read.map((message) => (message.envelope._tag === "Request" ? message.envelope.tag : "")).sort(),
        ["deferred", "run", "run"]
      )
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
    }).pipe(Effect.provide([StorageLayer, NodeCrypto.layerDigest]))
  )

  it.live("requests stored together are the rows effect's storage writes; one already stored is a duplicate", () =>
    Effect.gen(function* () {
      const client = yield* SqlClient.SqlClient
      const sql = client.withoutTransforms()
      yield* sql`DELETE FROM cluster_messages WHERE shard_id IN ('default:8', 'default:9')`
      const base = yield* SqlMessageStorage.makeEncoded()
      const statements: Array<number> = []
      const storage = ClusterStorage.batchRequestSaves(base, client)
      const request = (id: number, shard: string, entityId: string, extra: Record<string, unknown> = {}) => ({
        envelope: {
          _tag: "Request" as const,
          requestId: String(id),
          address: {
            shardId: { group: "default", id: shard === "default:8" ? 8 : 9 },
            entityType: "Workflow/Execution",
            entityId
          },
          tag: "run",
          payload: { executionId: entityId, note: "ünïcode \u0000 ok" },
          headers: { "x-test": "1" },
          ...extra
        },
        primaryKey: `Workflow/Execution/${entityId}/run/${entityId}`,
        deliverAt: null
      })

      // The same request saved by effect's storage (shard 8) and by ours (shard 9): the same row.
      const traced = { traceId: "t1", spanId: "s1", sampled: true }
      assert.deepStrictEqual(
        yield* base.saveEnvelope(request(8001, "default:8", "same-8", traced)),
        MessageStorage.SaveResultEncoded.Success()
      )
      assert.deepStrictEqual(
        yield* storage.saveEnvelope(request(9001, "default:9", "same-9", traced)),
        MessageStorage.SaveResultEncoded.Success()
      )
      const row = (id: string) =>
        sql<Record<string, unknown>>`SELECT * FROM cluster_messages WHERE id = ${id}`.pipe(
          Effect.map((rows) => {
            const { id: _id, rowid: _rowid, message_id, shard_id, entity_id, request_id, payload, ...rest } = rows[0]!
            return {
              ...rest,
              message_id: String(message_id).replace(/same-\d/g, "same"),
              entity_id: String(entity_id).replace(/\d$/, ""),
              payload: String(payload).replace(/same-\d/, "same"),
              shard: String(shard_id),
              request: String(request_id)
            }
          })
        )
      const ours = yield* row("9001")
      const effects = yield* row("8001")
      assert.deepStrictEqual({ ...ours, shard: "", request: "" }, { ...effects, shard: "", request: "" })
      assert.strictEqual(ours.shard, "default:9")
      assert.strictEqual(ours.request, "9001")

      // Twenty at once: one of them the same start as another, and one
      // already stored. The new ones are stored together, and the
      // duplicates answered with the original's id.
      const counted: MessageStorage.Encoded = {
        ...base,
        saveEnvelope: (save) => {
          statements.push(Number(save.envelope.requestId))
          return base.saveEnvelope(save)
        }
      }
      const batched = ClusterStorage.batchRequestSaves(counted, client)
      const saves = [
        ...Array.from({ length: 18 }, (_, i) => request(9100 + i, "default:9", `run-${i}`)),
        request(9200, "default:9", "run-3"),
        request(9201, "default:9", "same-9")
      ]
      const results = yield* Effect.forEach(saves, batched.saveEnvelope, { concurrency: "unbounded" })
      assert.deepStrictEqual(
        results.slice(0, 18).map((result) => result._tag),
        Array(18).fill("Success")
      )
      assert.deepStrictEqual(
        results.slice(18).map((result) => (result._tag === "Duplicate" ? String(result.originalId) : result._tag)),
        ["9103", "9001"]
      )
      assert.deepStrictEqual(statements.sort(), [9200, 9201], "only the duplicates went through effect's own save")
      const [{ count, statements: writes }] = yield* sql<{ count: string; statements: string }>`
        SELECT count(*)::text AS count, count(DISTINCT xmin::text)::text AS statements
        FROM cluster_messages WHERE shard_id = 'default:9' AND id BETWEEN 9100 AND 9199`
      assert.strictEqual(count, "18")
      // Rows written by one statement (one transaction) share their xmin.
      assert.isAtMost(Number(writes), 2, "the 18 new requests were stored by one or two statements")

      // A request the table refuses (a trace id longer than its column) fails
      // alone: the others of its statement are each stored by effect's save.
      const mixed = yield* Effect.forEach(
        [
          request(9300, "default:9", "mixed-0"),
          request(9301, "default:9", "mixed-1", { traceId: "t".repeat(40), spanId: "s1", sampled: false }),
          request(9302, "default:9", "mixed-2")
        ],
        (save) => Effect.result(batched.saveEnvelope(save)),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(
        mixed.map((outcome) => outcome._tag),
        ["Success", "Failure", "Success"]
      )
      const kept = yield* sql<{
        id: string
      }>`SELECT id::text FROM cluster_messages WHERE id BETWEEN 9300 AND 9399 ORDER BY id`
      assert.deepStrictEqual(
        kept.map((row) => row.id),
        ["9300", "9302"]
      )
      yield* sql`DELETE FROM cluster_messages WHERE shard_id IN ('default:8', 'default:9')`
    }).pipe(Effect.provide([StorageLayer, NodeCrypto.layerDigest]))
  )

  it.live("final replies saved together: each marks its own request; a second final reply fails alone", () =>
    Effect.gen(function* () {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const saveReply = ClusterStorage.makeSaveReply(yield* SqlClient.SqlClient)
      yield* sql`DELETE FROM cluster_messages WHERE shard_id = 'default:10'`
      const ids = Array.from({ length: 12 }, (_, i) => String(10_000 + i))
      for (const id of ids) {
        yield* sql`
          INSERT INTO cluster_messages (id, message_id, shard_id, entity_type, entity_id, kind, tag, payload, headers, request_id)
          VALUES (${id}, ${`test/${id}`}, 'default:10', 'Workflow/Test', ${id}, 0, 'run', '{}', '{}', ${id})
        `
      }
      const exit = (n: number) => ({ _tag: "Success", value: { n } }) as never
      // Eleven at once: stored together.
      const first = ids.slice(0, 11)
      yield* Effect.forEach(
        first,
        (requestId, i) => saveReply({ _tag: "WithExit", id: String(20_100 + i), requestId, exit: exit(i) }),
        {
          concurrency: "unbounded"
        }
      )
      const [{ writes }] = yield* sql<{ writes: string }>`
        SELECT count(DISTINCT xmin::text)::text AS writes FROM cluster_replies WHERE request_id IN ${sql.in(first)}`
      // Rows written by one statement (one transaction) share their xmin.
      assert.isAtMost(Number(writes), 2, "the 11 replies were stored by one or two statements")

      // Then a second final reply for the first request, with the last
      // request's own: the batch fails on the first, and each is written
      // again alone, so only the faulty one fails.
      const outcomes = yield* Effect.forEach(
        [
          { _tag: "WithExit" as const, id: "20200", requestId: ids[0]!, exit: exit(-1) },
          { _tag: "WithExit" as const, id: "20111", requestId: ids[11]!, exit: exit(11) }
        ],
        (reply) => Effect.result(saveReply(reply)),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(
        outcomes.map((outcome) => outcome._tag),
        ["Failure", "Success"]
      )
      const marked = yield* sql<{ id: string; processed: boolean; last_reply_id: string }>`
        SELECT id::text, processed, last_reply_id::text FROM cluster_messages WHERE shard_id = 'default:10' ORDER BY id`
      assert.deepStrictEqual(
        marked.map((row) => [row.id, row.processed, row.last_reply_id]),
        ids.map((id, i) => [id, true, String(20_100 + i)])
      )
      const stored = yield* sql<{ request_id: string; payload: string }>`
        SELECT request_id::text, payload FROM cluster_replies WHERE request_id IN ${sql.in(ids)} ORDER BY request_id`
      assert.deepStrictEqual(
        stored.map((reply) => [reply.request_id, JSON.parse(reply.payload).value.n]),
        ids.map((id, i) => [id, i])
      )
      yield* sql`DELETE FROM cluster_replies WHERE request_id IN ${sql.in(ids)}`
      yield* sql`DELETE FROM cluster_messages WHERE shard_id = 'default:10'`
    }).pipe(Effect.provide(StorageLayer))
  )

  it.live(
    "a read whose interrupt prefetch fails still gives what it claimed; the starts' lookups go to the database",
    () =>
      Effect.gen(function* () {
        const client = yield* SqlClient.SqlClient
        const sql = client.withoutTransforms()
        yield* sql`DELETE FROM cluster_messages WHERE shard_id = 'default:11'`
        yield* sql`
        INSERT INTO cluster_messages (id, message_id, shard_id, entity_type, entity_id, kind, tag, payload, headers, request_id)
        VALUES ('11001', 'Workflow/Execution/run-c/run/', 'default:11', 'Workflow/Execution', 'run-c', 0, 'run', '{}', '{}', '11001')
      `
        // The prefetch's statement fails for real: its client's database has no cluster tables.
        const broken = Context.get(
          yield* Layer.build(PgClient.layer({ url: Redacted.make(yield* EmptyDatabaseUrl) })),
          SqlClient.SqlClient
        )
        const base = yield* SqlMessageStorage.makeEncoded()
        const asked: Array<string> = []
        const counted: MessageStorage.Encoded = {
          ...base,
          requestIdForPrimaryKey: (primaryKey) => {
            asked.push(primaryKey)
            return base.requestIdForPrimaryKey(primaryKey)
          }
        }
        const storage = ClusterStorage.prefetchStartLookups(counted, broken)
        const keyC = ClusterStorage.interruptKey("Workflow/Execution", "run-c")

        const read = yield* storage.unprocessedMessages(["default:11"], Date.now())
        assert.deepStrictEqual(
          read.map((message) => (message.envelope._tag === "Request" ? message.envelope.tag : "")),
          ["run"]
        )
        assert.deepStrictEqual(yield* storage.requestIdForPrimaryKey(keyC), Option.none())
        assert.deepStrictEqual(asked, [keyC], "answered by the database")
        yield* sql`DELETE FROM cluster_messages WHERE shard_id = 'default:11'`
      }).pipe(Effect.provide([StorageLayer, NodeCrypto.layerDigest]))
  )

  it.live(
    "an interrupt saved after its workflow's start was read is seen by the start's lookup: at once when saved here, once read when saved elsewhere",
    () =>
      Effect.gen(function* () {
        const client = yield* SqlClient.SqlClient
        const sql = client.withoutTransforms()
        yield* sql`DELETE FROM cluster_messages WHERE shard_id = 'default:12'`
        const insert = (id: number, messageId: string, entityId: string, tag: string, payload: unknown = {}) =>
          sql`
          INSERT INTO cluster_messages (id, message_id, shard_id, entity_type, entity_id, kind, tag, payload, headers, request_id)
          VALUES (${String(id)}, ${messageId}, 'default:12', 'Workflow/Execution', ${entityId}, 0, ${tag}, ${JSON.stringify(payload)}, '{}', ${String(id)})
        `
        yield* insert(12001, "Workflow/Execution/run-d/run/", "run-d", "run")
        yield* insert(12002, "Workflow/Execution/run-e/run/", "run-e", "run")
        const storage = ClusterStorage.prefetchStartLookups(yield* SqlMessageStorage.makeEncoded(), client)
        const keyD = ClusterStorage.interruptKey("Workflow/Execution", "run-d")
        const keyE = ClusterStorage.interruptKey("Workflow/Execution", "run-e")
        assert.strictEqual((yield* storage.unprocessedMessages(["default:12"], Date.now())).length, 2)

        // This node interrupts run-d (the engine's deferredDone saves the signal under its key).
        const saved = yield* storage.saveEnvelope({
          envelope: {
            _tag: "Request",
            requestId: "12003",
            address: { shardId: { group: "default", id: 12 }, entityType: "Workflow/Execution", entityId: "run-d" },
            tag: "deferred",
            payload: { name: "Workflow/InterruptSignal", exit: { _tag: "Success", value: null } },
            headers: {}
          },
          primaryKey: keyD,
          deliverAt: null
        })
        assert.strictEqual(saved._tag, "Success")
        assert.deepStrictEqual(Option.map(yield* storage.requestIdForPrimaryKey(keyD), String), Option.some("12003"))

        // Another node interrupts run-e: this node learns of it by reading the signal.
        yield* insert(12004, keyE, "run-e", "deferred", {
          name: "Workflow/InterruptSignal",
          exit: { _tag: "Success", value: null }
        })
        const signals = yield* storage.unprocessedMessages(["default:12"], Date.now())
        assert.deepStrictEqual(
          signals.map((message) => (message.envelope._tag === "Request" ? message.envelope.requestId : "")).sort(),
          ["12003", "12004"]
        )
        assert.deepStrictEqual(Option.map(yield* storage.requestIdForPrimaryKey(keyE), String), Option.some("12004"))
        yield* sql`DELETE FROM cluster_messages WHERE shard_id = 'default:12'`
      }).pipe(Effect.provide([StorageLayer, NodeCrypto.layerDigest]))
  )

  it.live("a coalesced lock confirmation returns under a test clock", () =>
    Effect.gen(function* () {
      const base = yield* RunnerStorage.RunnerStorage
      yield* base.register(Runner.make({ address, groups: ["default"], weight: 1 }), true)
      assert.strictEqual((yield* base.acquire(address, shards.slice(0, 2))).length, 2)
      const storage = yield* ClusterStorage.coalesceRefreshes(base)
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
      yield* base.releaseAll(address)
    }).pipe(Effect.provide(StorageLayer))
  )

  it.live(
    "the index of waiting messages takes the place of effect's shard index, and stays when effect starts again; shard statistics are short",
    () =>
      Effect.gen(function* () {
        const sql = (yield* SqlClient.SqlClient).withoutTransforms()
        const indexes = Effect.map(
          sql<{ readonly name: string; readonly definition: string }>`
          SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          WHERE i.indrelid = 'cluster_messages'::regclass`,
          (rows) => new Map(rows.map((row) => [row.name, row.definition]))
        )
        const fillfactor = Effect.map(
          sql<{
            readonly options: ReadonlyArray<string> | null
          }>`SELECT reloptions AS options FROM pg_class WHERE relname = 'cluster_messages'`,
          ([row]) => row?.options ?? []
        )
        // As an older deployment has it: effect's index, and ours beside it.
        yield* sql`CREATE INDEX IF NOT EXISTS cluster_messages_unprocessed_idx ON cluster_messages (rowid) WHERE NOT processed`
        const before = yield* indexes
        assert.match(before.get("cluster_messages_shard_idx")!, /\(shard_id, processed, last_read, deliver_at\)$/)
        assert.isFalse(ClusterStorage.isWaitingIndex(before.get("cluster_messages_shard_idx")))

        yield* ClusterStorage.indexClusterMessages
        const after = yield* indexes
        assert.isTrue(
          ClusterStorage.isWaitingIndex(after.get("cluster_messages_shard_idx")),
          after.get("cluster_messages_shard_idx")
        )
        assert.isFalse(after.has("cluster_messages_unprocessed_idx"))
        assert.isFalse(after.has("cluster_messages_waiting_idx"))
        assert.match(after.get("cluster_messages_entity_idx")!, /\(entity_id\)$/)
        assert.deepStrictEqual(yield* fillfactor, ["fillfactor=70"])
        const [statistics] = yield* sql<{ readonly target: number | null }>`
        SELECT attstattarget AS target FROM pg_attribute WHERE attrelid = 'cluster_messages'::regclass AND attname = 'shard_id'`
        assert.strictEqual(Number(statistics?.target), 10)

        // effect makes its index at each start only if none of that name exists.
        yield* SqlMessageStorage.makeEncoded()
        yield* ClusterStorage.indexClusterMessages
        assert.deepStrictEqual(yield* indexes, after)

        // A start cut short after the build, before the swap, is finished by the next.
        yield* sql`DROP INDEX cluster_messages_shard_idx`
        yield* SqlMessageStorage.makeEncoded()
        yield* sql`CREATE INDEX cluster_messages_waiting_idx ON cluster_messages (shard_id, rowid) WHERE NOT processed`
        assert.isFalse(ClusterStorage.isWaitingIndex((yield* indexes).get("cluster_messages_shard_idx")))
        yield* ClusterStorage.indexClusterMessages
        assert.deepStrictEqual(yield* indexes, after)

        // The poll of waiting messages still finds them by shard.
        const storage = yield* SqlMessageStorage.makeEncoded()
        yield* sql`INSERT INTO cluster_messages (id, message_id, shard_id, entity_type, entity_id, kind, tag, payload, headers, request_id)
        VALUES (777001, NULL, 'default:33', 'Probe', 'p-1', 0, 'ping', '{}', '{}', 777001)`
        const read = yield* storage.unprocessedMessages(["default:33"], Date.now())
        assert.deepStrictEqual(
          read.map((message) => (message.envelope._tag === "Request" ? message.envelope.tag : "")),
          ["ping"]
        )
        yield* sql`DELETE FROM cluster_messages WHERE id = 777001`
      }).pipe(Effect.provide([StorageLayer, NodeCrypto.layerDigest]))
  )
})
