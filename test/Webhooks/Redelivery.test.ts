import { assert, describe, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { AppSettings } from "../../src/Config.ts"
import { chunksOf, maxIdsPerStatement } from "../../src/Database/Chunks.ts"
import { backfill, backfilledPerEvent } from "../../src/Database/migrations/0021_webhook_redelivery.ts"
import { newId, TenantId } from "../../src/Domain/Ids.ts"
import { DeliveryWorkflow } from "../../src/Webhooks/Delivery.ts"
import { Webhooks } from "../../src/Webhooks/Webhooks.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// Redelivery is bounded per event and rate-limited per tenant in the
// database, and the prune of delivery workflows' messages does not depend on
// how many redeliveries an event had: 70,000 of one tenant's event (made in
// SQL here, as the review did) hold back no other tenant's prune.

const rateWindowSeconds = 24
const settings: Partial<AppSettings> = {
  webhookAllowPrivate: true,
  webhookRetrySchedule: [Duration.millis(100)],
  webhookTimeout: Duration.millis(500),
  // Finished deliveries' messages are due at once; the prune runs every 10 s.
  webhookMessagesRetention: Duration.zero,
  webhookMaxRedeliveries: 10,
  // 12 per 24 s: drains one every 2 s, so a burst's count is exact.
  webhookRedeliveriesPerTenant: 12,
  webhookRedeliveryWindow: Duration.seconds(rateWindowSeconds)
}

const entityType = "Workflow/WebhookDelivery"

/** A tenant with an orchestration whose webhook goes to `url`, and the means to make and redeliver its events. */
const setUp = (url: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const webhooks = yield* Webhooks
    const sql = yield* PgClient.PgClient
    const account = yield* TestServer.signUp()
    const agent = yield* TestServer.createAgent(account, { model: "local" })
    const session = TestServer.bearer(account.token)
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: session,
      body: { name: "Hooked", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }], outputWebhookUrl: url }
    })
    assert.strictEqual(created.status, 201, created.text)
    const id = created.body.id as string
    const tenantId = TenantId.make(account.tenantId)
    /** A delivered event of the orchestration. */
    const event = (subjectId = "run") =>
      Effect.gen(function* () {
        const eventId = (yield* webhooks.enqueue({
          tenantId,
          owner: { kind: "orchestration", id },
          subjectId,
          type: "test.redelivery",
          data: { subjectId }
        }))!
        assert.isString(eventId)
        yield* webhooks.deliver(eventId)
        yield* TestServer.waitFor(
          "the event's delivery",
          sql<{ status: string }>`SELECT status FROM webhook_events WHERE id = ${eventId}`.pipe(
            Effect.map((rows) => (rows[0]?.status === "delivered" ? true : undefined)),
            Effect.orDie
          )
        )
        return eventId
      })
    const redeliver = (eventId: string) =>
      client.request("POST", `/api/orchestrations/${id}/deliveries/${eventId}/redeliver`, { headers: session })
    return { account, tenantId, id, session, event, redeliver }
  })

/** Stored messages of delivery workflows, by their ids, and whether an event is marked pruned. */
const probes = (sql: SqlClient.SqlClient) => ({
  messagesOf: (entityIds: ReadonlyArray<string>) =>
    sql<{ n: number }>`SELECT count(*)::int AS n FROM cluster_messages
      WHERE entity_type = ${entityType} AND entity_id = ANY (${entityIds}::text[])`.pipe(
      Effect.map((rows) => rows[0]!.n),
      Effect.orDie
    ),
  prunedFlag: (eventId: string) =>
    sql<{ messagesPruned: boolean }>`SELECT messages_pruned FROM webhook_events WHERE id = ${eventId}`.pipe(
      Effect.map((rows) => rows[0]!.messagesPruned),
      Effect.orDie
    )
})

/** The SQL form of a delivery workflow's id that simulated redeliveries are stored under (checked against effect below). */
const sqlEntityId = (eventIdColumn: string, redeliveryColumn: string) =>
  `left(encode(sha256(convert_to('15:WebhookDelivery:' || ${eventIdColumn} || ':' || ${redeliveryColumn}, 'UTF8')), 'hex'), 32)`

layer(TestServer.layer(settings), { excludeTestServices: true })("webhook redelivery", (it) => {
  describe("bounds", () => {
    it.effect("an event is redelivered 10 times at most: the 11th is a 409 problem naming the limit", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const sql = yield* PgClient.PgClient
          const { messagesOf, prunedFlag } = probes(sql)
          const webhooks = yield* Webhooks
          const receiver = yield* FakeReceiver.make
          const flow = yield* setUp(receiver.url())
          const eventId = yield* flow.event()
          for (let n = 1; n <= 10; n++) {
            const accepted = yield* flow.redeliver(eventId)
            assert.strictEqual(accepted.status, 202, `redelivery ${n}: ${accepted.text}`)
            assert.deepStrictEqual(accepted.body, { eventId, status: "pending" })
          }
          const refused = yield* flow.redeliver(eventId)
          assert.strictEqual(refused.status, 409, refused.text)
          assert.match(refused.headers.get("content-type") ?? "", /application\/problem\+json/)
          assert.strictEqual(refused.body.type, "urn:agent-host:problem:redelivery-limit-reached")
          assert.strictEqual(refused.body.setting, "WEBHOOK_MAX_REDELIVERIES")
          assert.strictEqual(refused.body.limit, 10)
          assert.match(refused.body.detail, /redelivered 10 times/)
          const [row] = yield* sql<{ redelivery: number }>`SELECT redelivery FROM webhook_events WHERE id = ${eventId}`
          assert.strictEqual(row!.redelivery, 10)

          // Each redelivery's workflow id was stored as it was made: effect's own id for it.
          const stored = yield* sql<{ redelivery: number; entityId: string }>`
          SELECT redelivery, entity_id FROM webhook_redeliveries WHERE event_id = ${eventId} ORDER BY redelivery`
          assert.deepStrictEqual(
            stored.map((r) => r.redelivery),
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
          )
          for (const r of stored) {
            assert.strictEqual(r.entityId, yield* DeliveryWorkflow.executionId({ eventId, redelivery: r.redelivery }))
          }

          // The last one is delivered; once finished, its workflows' messages are pruned and the stored ids forgotten.
          yield* TestServer.waitFor(
            "the 10th redelivery in the log",
            Effect.map(webhooks.deliveries(flow.tenantId, { kind: "orchestration", id: flow.id }, {}), (page) =>
              page.data.some((attempt) => attempt.redelivery === 10 && attempt.httpStatus === 200) ? true : undefined
            ).pipe(Effect.orDie)
          )
          const allIds = [
            yield* DeliveryWorkflow.executionId({ eventId, redelivery: 0 }),
            ...stored.map((r) => r.entityId)
          ]
          yield* TestServer.waitFor(
            "the event's messages pruned",
            Effect.map(Effect.all([messagesOf(allIds), prunedFlag(eventId)]), ([n, pruned]) =>
              n === 0 && pruned ? true : undefined
            ),
            30_000
          )
          const left = yield* sql`SELECT 1 FROM webhook_redeliveries WHERE event_id = ${eventId}`
          assert.strictEqual(left.length, 0)
          // Still refused after the prune: the count is the event's.
          assert.strictEqual((yield* flow.redeliver(eventId)).status, 409)
        })
      )
    )

    it.effect(
      "redeliveries are rate-limited per tenant in the database: a concurrent burst gets exactly the bucket, then 429 with Retry-After",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            const flow = yield* setUp(receiver.url())
            const events = [yield* flow.event("a"), yield* flow.event("b"), yield* flow.event("c")]
            // 21 at once, 7 per event (under the per-event cap): the bucket holds 12.
            const started = Date.now()
            const answers = yield* Effect.forEach(
              Array.from({ length: 21 }, (_, i) => events[i % 3]!),
              (eventId) => flow.redeliver(eventId),
              { concurrency: "unbounded" }
            )
            const elapsedSeconds = (Date.now() - started) / 1000
            const accepted = answers.filter((answer) => answer.status === 202).length
            const refused = answers.filter((answer) => answer.status !== 202)
            // The bucket drains one every 2 s: a slow burst may fit that many more.
            assert.isAtLeast(accepted, 12)
            assert.isAtMost(accepted, 12 + Math.floor(elapsedSeconds / 2))
            assert.strictEqual(accepted + refused.length, 21)
            for (const answer of refused) {
              assert.strictEqual(answer.status, 429, answer.text)
              assert.strictEqual(answer.body.type, "urn:agent-host:problem:redelivery-rate-limited")
              assert.strictEqual(answer.body.setting, "WEBHOOK_REDELIVERIES_PER_TENANT")
              assert.strictEqual(answer.body.limit, 12)
              assert.strictEqual(answer.body.windowSeconds, rateWindowSeconds)
              assert.isAtLeast(answer.body.retryAfter, 1)
              assert.isAtMost(answer.body.retryAfter, 2)
              assert.strictEqual(answer.headers.get("retry-after"), String(answer.body.retryAfter))
            }

            // Another tenant is not held back.
            const other = yield* setUp(receiver.url())
            const otherEvent = yield* other.event()
            assert.strictEqual((yield* other.redeliver(otherEvent)).status, 202)

            // Once the bucket has drained by one, this tenant redelivers again: not before the
            // Retry-After its refusal gave (whole seconds, rounded up), counted from before the burst.
            const retryAfter = refused[0]!.body.retryAfter as number
            const again = yield* TestServer.waitFor(
              "a redelivery to fit again",
              Effect.map(flow.redeliver(events[0]!), (answer) => (answer.status === 202 ? answer : undefined)),
              10_000
            )
            assert.strictEqual(again.body.eventId, events[0])
            assert.isAtLeast(Date.now() - started, (retryAfter - 1) * 1000)
          })
        )
    )
  })

  describe("the prune", () => {
    it.effect(
      "the SQL form of a delivery workflow's id is effect's, and the migration's backfill stores the ids of earlier redeliveries",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const sql = yield* PgClient.PgClient
            const receiver = yield* FakeReceiver.make
            const flow = yield* setUp(receiver.url())
            const eventId = yield* flow.event()
            const rows = yield* Effect.gen(function* () {
              // As if redelivered 3 times before the migration, no id stored.
              yield* sql`UPDATE webhook_events SET redelivery = 3, messages_pruned = false WHERE id = ${eventId}`
              yield* backfill
              return yield* sql<{ redelivery: number; entityId: string }>`
            SELECT redelivery, entity_id FROM webhook_redeliveries WHERE event_id = ${eventId} ORDER BY redelivery`
            }).pipe(sql.withTransaction)
            assert.deepStrictEqual(
              rows.map((row) => row.redelivery),
              [1, 2, 3]
            )
            for (const row of rows) {
              assert.strictEqual(
                row.entityId,
                yield* DeliveryWorkflow.executionId({ eventId, redelivery: row.redelivery })
              )
            }
            const [formula] = yield* sql.unsafe<{ id: string }>(`SELECT ${sqlEntityId("$1::text", "$2::int")} AS id`, [
              eventId,
              7
            ])
            assert.strictEqual(formula!.id, yield* DeliveryWorkflow.executionId({ eventId, redelivery: 7 }))
            assert.strictEqual(backfilledPerEvent, 10_000)
          })
        )
    )

    it.effect(
      "70,000 redeliveries of one tenant's event: another tenant's finished event is still pruned, and so in time is the big one",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const sql = yield* PgClient.PgClient
            const { messagesOf, prunedFlag } = probes(sql)
            const receiver = yield* FakeReceiver.make
            const count = 70_000
            const simulatedIds = 1_000_000_000_000
            const heavy = yield* setUp(receiver.url())
            const heavyEvent = yield* heavy.event()
            // 70,000 redeliveries as the route would have stored them, each with
            // a finished workflow's message and reply in effect's tables, the
            // event due before any other (the head of every prune batch).
            yield* Effect.gen(function* () {
              yield* sql.unsafe(
                `INSERT INTO webhook_redeliveries (event_id, redelivery, entity_id)
             SELECT $1::text, n, ${sqlEntityId("$1::text", "n")} FROM generate_series(1, ${count}) AS n`,
                [heavyEvent]
              )
              // Ids far below the cluster's own (snowflakes, about 2^57).
              yield* sql`
            INSERT INTO cluster_messages (id, message_id, shard_id, entity_type, entity_id, kind, tag, payload, headers,
                                          processed, request_id)
            SELECT ${simulatedIds}::bigint + d.redelivery, NULL, 'default:1', ${entityType}, d.entity_id, 0, 'run', '{}', '{}',
                   true, ${simulatedIds}::bigint + d.redelivery
            FROM webhook_redeliveries d WHERE d.event_id = ${heavyEvent}`
              yield* sql`
            INSERT INTO cluster_replies (id, kind, request_id, payload, sequence)
            SELECT ${simulatedIds}::bigint + ${count} + d.redelivery, 0, ${simulatedIds}::bigint + d.redelivery, '{}', NULL
            FROM webhook_redeliveries d WHERE d.event_id = ${heavyEvent}`
              yield* sql`UPDATE webhook_events SET redelivery = ${count}, status = 'delivered', messages_pruned = false,
                       updated_at = now() - interval '1 hour' WHERE id = ${heavyEvent}`
            }).pipe(sql.withTransaction)
            const heavyIds = (yield* sql<{
              entityId: string
            }>`SELECT entity_id FROM webhook_redeliveries WHERE event_id = ${heavyEvent}`).map((row) => row.entityId)
            assert.strictEqual(heavyIds.length, count)
            assert.strictEqual(yield* messagesOf(heavyIds), count)

            // Another tenant's event, delivered after: its messages are stored, then pruned within a bound.
            const light = yield* setUp(receiver.url())
            const lightEvent = yield* light.event()
            const lightIds = [yield* DeliveryWorkflow.executionId({ eventId: lightEvent, redelivery: 0 })]
            assert.isAbove(yield* messagesOf(lightIds), 0)
            yield* TestServer.waitFor(
              "the other tenant's event pruned",
              Effect.map(Effect.all([messagesOf(lightIds), prunedFlag(lightEvent)]), ([n, pruned]) =>
                n === 0 && pruned ? true : undefined
              ),
              30_000
            )
            yield* TestServer.waitFor(
              "the 70,000 redeliveries' messages pruned",
              Effect.map(Effect.all([messagesOf(heavyIds), prunedFlag(heavyEvent)]), ([n, pruned]) =>
                n === 0 && pruned ? true : undefined
              ),
              60_000
            )
            const [left] = yield* sql<{ stored: number; replies: number }>`
          SELECT (SELECT count(*)::int FROM webhook_redeliveries WHERE event_id = ${heavyEvent}) AS stored,
                 (SELECT count(*)::int FROM cluster_replies WHERE id > ${simulatedIds}::bigint AND id <= ${simulatedIds}::bigint + 2 * ${count}) AS replies`
            assert.deepStrictEqual(left, { stored: 0, replies: 0 })
          })
        ),
      // Its waits are bounded (30 s and 60 s): the test's own bound covers both, and the 70,000 rows written first.
      120_000
    )

    it.effect("an event whose prune fails is logged and stepped over: the events after it are pruned", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const sql = yield* PgClient.PgClient
          const { prunedFlag } = probes(sql)
          const receiver = yield* FakeReceiver.make
          const poisoned = yield* setUp(receiver.url())
          const poisonEvent = yield* poisoned.event()
          // A real failure in the database, for this event only: forgetting its stored redeliveries raises.
          yield* sql.unsafe(`
          CREATE FUNCTION refuse_poison_prune() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            IF OLD.event_id = '${poisonEvent}' THEN RAISE EXCEPTION 'poisoned prune'; END IF;
            RETURN OLD;
          END $$`)
          yield* sql.unsafe(`CREATE TRIGGER refuse_poison_prune BEFORE DELETE ON webhook_redeliveries
                           FOR EACH ROW EXECUTE FUNCTION refuse_poison_prune()`)
          yield* Effect.addFinalizer(() =>
            Effect.orDie(sql.unsafe(`DROP TRIGGER IF EXISTS refuse_poison_prune ON webhook_redeliveries`))
          )
          yield* Effect.gen(function* () {
            yield* sql`INSERT INTO webhook_redeliveries (event_id, redelivery, entity_id) VALUES (${poisonEvent}, 1, 'poison-1')`
            yield* sql`UPDATE webhook_events SET redelivery = 1, status = 'delivered', messages_pruned = false,
                       updated_at = now() - interval '1 hour' WHERE id = ${poisonEvent}`
          }).pipe(sql.withTransaction)

          // Events of other tenants, due after it, in the same batch.
          const others = yield* Effect.forEach([0, 1, 2], () =>
            Effect.gen(function* () {
              const flow = yield* setUp(receiver.url())
              return yield* flow.event()
            })
          )
          yield* TestServer.waitFor(
            "the other events pruned",
            Effect.map(Effect.forEach(others, prunedFlag), (flags) => (flags.every(Boolean) ? true : undefined)),
            30_000
          )
          assert.isFalse(yield* prunedFlag(poisonEvent))

          // Once the fault is gone, the event is pruned like the others.
          yield* sql.unsafe(`DROP TRIGGER refuse_poison_prune ON webhook_redeliveries`)
          yield* TestServer.waitFor(
            "the event pruned once it can be",
            Effect.map(prunedFlag(poisonEvent), (pruned) => (pruned ? true : undefined)),
            30_000
          )
        })
      )
    )
  })

  describe("lists of ids", () => {
    it.effect("more than 1,000 ids are sent 1,000 at a time, and every one is answered", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const webhooks = yield* Webhooks
          const receiver = yield* FakeReceiver.make
          const flow = yield* setUp(receiver.url())
          assert.strictEqual(maxIdsPerStatement, 1_000)
          assert.deepStrictEqual(
            chunksOf(Array.from({ length: 2_500 }, (_, i) => i)).map((chunk) => chunk.length),
            [1_000, 1_000, 500]
          )
          assert.deepStrictEqual(chunksOf([]), [])
          // 70,000 owner ids in one statement would not even encode; chunked, the one with a webhook is found.
          const ids = [...Array.from({ length: 69_999 }, () => newId()), flow.id]
          const states = yield* webhooks.states(flow.tenantId, "orchestration", ids)
          assert.strictEqual(states.size, 70_000)
          assert.strictEqual(states.get(flow.id)!.outputWebhookUrl, receiver.url())
          assert.strictEqual([...states.values()].filter((state) => state.webhookEnabled).length, 1)
        })
      )
    )
  })
})
