import { assert, describe, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Sharding from "effect/cluster/Sharding"
import { SqlClient } from "effect/sql"
import { newId, TenantId } from "../../src/Domain/Ids.ts"
import { ExecutionWorkflow } from "../../src/Orchestrations/ExecutionWorkflow.ts"
import { ExecutionsRepo } from "../../src/Orchestrations/ExecutionsRepo.ts"
import * as ClusterStorage from "../../src/Runtime/ClusterStorage.ts"
import * as ClusterStarts from "../support/ClusterStarts.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// A new execution without an Idempotency-Key, as an execute stores it.
const unkeyed = (
  tenantId: string,
  orchestrationId: string,
  steps: ReadonlyArray<unknown>,
  input: string,
  variables: Record<string, string> = {},
  id: string = newId(),
  startRequest?: ClusterStorage.StartMessage
) =>
  Effect.flatMap(ExecutionsRepo, (repo) =>
    repo.insert({
      id,
      tenantId: TenantId.make(tenantId),
      orchestrationId,
      input,
      variables,
      steps: steps as never,
      timeoutMs: 60_000,
      idempotencyKey: null,
      requestHash: null,
      startRequest
    })
  )

// Waits until every one of these executions has finished (bounded).
const allFinished = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    eventually(
      Effect.flatMap(
        sql<{ open: string }>`
          SELECT count(*) FILTER (WHERE completed_at IS NULL)::text AS open FROM executions WHERE id IN ${sql.in(ids)}`,
        ([row]) =>
          row!.open === "0" ? Effect.void : Effect.die(new Error(`${row!.open} of the executions have not finished`))
      )
    )
  )

const startsOf = (ids: ReadonlyArray<string>) => ClusterStarts.startsOf("Execution", "executionId", ids)

// Executions accepted together (without an Idempotency-Key) are stored by
// one statement; each request still gets its own row back, committed.
describe("executions accepted and begun together", () => {
  layer(ExecutionsRepo.layer.pipe(Layer.provideMerge(TestServer.layer())), { excludeTestServices: true })((it) => {
    it.effect(
      "are stored by one statement, each answered with its own row; one that cannot be stored fails alone",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const { account, orchestrationId, steps } = yield* TestServer.oneStepOrchestration("local")
          const accept = (tenantId: string, input: string) =>
            unkeyed(tenantId, orchestrationId, steps, input, { n: input })

          const inputs = Array.from({ length: 20 }, (_, i) => `input ${i}`)
          const claimed = yield* Effect.forEach(inputs, (input) => accept(account.tenantId, input), {
            concurrency: "unbounded"
          })
          assert.deepStrictEqual(
            claimed.map((row) => [row.fresh, row.status, row.orchestrationId]),
            inputs.map(() => [true, "pending", orchestrationId])
          )
          const stored = yield* sql<{ id: string; input: string; variables: { n: string }; writes: string }>`
          SELECT id, input, variables, count(*) OVER (PARTITION BY xmin::text)::text AS writes
          FROM executions WHERE id IN ${sql.in(claimed.map((row) => row.id))}`
          const byId = new Map(stored.map((row) => [row.id, row]))
          // Each caller's id names the row stored from its own input.
          assert.deepStrictEqual(
            claimed.map((row) => byId.get(row.id)?.input),
            inputs
          )
          assert.deepStrictEqual(
            claimed.map((row) => byId.get(row.id)?.variables.n),
            inputs
          )
          // Rows written by one statement (one transaction) share their xmin.
          assert.isAtLeast(
            Math.max(...stored.map((row) => Number(row.writes))),
            10,
            "most of the 20 were stored together"
          )

          // A tenant that does not exist breaks the foreign key: that execution
          // fails, the others of its batch are stored on their own.
          const outcomes = yield* Effect.forEach(
            [account.tenantId, "no-such-tenant", account.tenantId],
            (tenantId, i) => Effect.exit(accept(tenantId, `mixed ${i}`)),
            { concurrency: "unbounded" }
          )
          assert.deepStrictEqual(
            outcomes.map((outcome) => outcome._tag),
            ["Success", "Failure", "Success"]
          )
          const [{ count }] = yield* sql<{
            count: string
          }>`SELECT count(*)::text AS count FROM executions WHERE input LIKE 'mixed %'`
          assert.strictEqual(count, "2")

          // And the service answers each execute with its own execution.
          const client = yield* TestClient
          const { key, orchestrationId: other } = yield* TestServer.oneStepOrchestration("local")
          const answers = yield* Effect.forEach(
            Array.from({ length: 8 }, (_, i) => `hello ${i}`),
            (input) =>
              client.request("POST", `/api/v1/orchestrations/${other}/execute`, {
                headers: TestServer.bearer(key),
                body: { input }
              }),
            { concurrency: "unbounded" }
          )
          assert.deepStrictEqual(
            answers.map((answer) => answer.status),
            Array(8).fill(202)
          )
          assert.strictEqual(new Set(answers.map((answer) => answer.body.executionId)).size, 8)
          const inputsOf = yield* sql<{ id: string; input: string }>`
          SELECT id, input FROM executions WHERE id IN ${sql.in(answers.map((answer) => answer.body.executionId))}`
          assert.deepStrictEqual(
            inputsOf.map((row) => row.input).sort(),
            Array.from({ length: 8 }, (_, i) => `hello ${i}`).sort()
          )
        }),
      { timeout: 30_000 }
    )

    it.effect(
      "with their workflows' start requests: each row and its start in one statement, and they run; a batch that fails stores each row alone, without its start",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const sharding = yield* Sharding.Sharding
          const localStart = ClusterStorage.startMessage(sharding, ExecutionWorkflow)
          const { account, orchestrationId, steps } = yield* TestServer.oneStepOrchestration("local")
          // This single node holds every shard once it has taken their locks.
          const startFor = (id: string) =>
            eventually(
              Effect.flatMap(localStart({ executionId: id }), (row) =>
                row === undefined ? Effect.die(new Error("the shard is not held here yet")) : Effect.succeed(row)
              )
            )
          const accept = (input: string) =>
            Effect.gen(function* () {
              const id = newId()
              return yield* unkeyed(account.tenantId, orchestrationId, steps, input, {}, id, yield* startFor(id))
            })

          const claimed = yield* Effect.forEach(
            Array.from({ length: 20 }, (_, i) => `started ${i}`),
            accept,
            { concurrency: "unbounded" }
          )
          assert.deepStrictEqual(
            claimed.map((row) => [row.fresh, row.started]),
            claimed.map(() => [true, true])
          )
          const ids = claimed.map((row) => row.id)
          // Each start is stored as the cluster's client stores one; read by
          // the cluster's poll (nothing told it here), each execution runs.
          const starts = yield* startsOf(ids)
          assert.strictEqual(starts.size, 20)
          for (const id of ids) {
            const start = starts.get(id)!
            assert.strictEqual(start.message_id, `Workflow/Execution/${start.entity_id}/run/`)
            assert.strictEqual(start.request_id, start.id)
            assert.strictEqual(start.entity_id, yield* ExecutionWorkflow.executionId({ executionId: id }))
          }
          yield* allFinished(ids)
          const finished = yield* sql<{ status: string }>`SELECT status FROM executions WHERE id IN ${sql.in(ids)}`
          assert.deepStrictEqual(
            finished.map((row) => row.status),
            ids.map(() => "completed")
          )

          // A start that cannot be stored (its key is stored already) fails its
          // statement: each row of the batch is then stored alone, without its
          // start (the caller sends it the usual way), and nothing is stored twice.
          const taken = starts.get(ids[0]!)!
          const mixedIds = [newId(), newId(), newId()]
          const mixedStarts = yield* Effect.forEach(mixedIds, (id, i) =>
            Effect.map(startFor(id), (start) =>
              i === 1 ? { row: { ...start.row, message_id: taken.message_id } } : start
            )
          )
          // Submitted in one tick, the three go in one batch.
          const mixed = yield* Effect.forEach(
            mixedIds,
            (id, i) => unkeyed(account.tenantId, orchestrationId, steps, `mixed start ${i}`, {}, id, mixedStarts[i]),
            { concurrency: "unbounded" }
          )
          assert.deepStrictEqual(
            mixed.map((row) => [row.id, row.fresh, row.status, row.started]),
            mixedIds.map((id) => [id, true, "pending", undefined])
          )
          assert.strictEqual((yield* startsOf(mixedIds)).size, 0)
          const [{ count }] = yield* sql<{ count: string }>`
          SELECT count(*)::text AS count FROM cluster_messages WHERE message_id = ${taken.message_id as string}`
          assert.strictEqual(count, "1")
        }).pipe(Effect.orDie),
      { timeout: 30_000 }
    )

    it.effect(
      "an execute on this node's shard stores its start request with its row, as the cluster's client stores one (a keyed execute's)",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const { key, orchestrationId } = yield* TestServer.oneStepOrchestration("local")
          const execute = (headers: Record<string, string>) =>
            client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
              headers: { ...TestServer.bearer(key), ...headers },
              body: { input: "compare" }
            })
          yield* ClusterStarts.shardsHeld
          const starts = () => ClusterStarts.startsCounted("Execution")
          const before = yield* starts()
          const ours = yield* execute({})
          assert.deepStrictEqual(yield* starts(), [before[0]! + 1, before[1]!], "stored with its row")
          // A keyed execute is claimed in a transaction, and its start sent by the cluster's client.
          const clients = yield* execute({ "idempotency-key": `compare-${newId()}` })
          assert.deepStrictEqual([ours.status, clients.status], [202, 202])
          assert.deepStrictEqual(yield* starts(), [before[0]! + 1, before[1]! + 1], "sent by the cluster's client")
          const ids = [ours.body.executionId as string, clients.body.executionId as string]
          yield* allFinished(ids)
          const { own } = yield* ClusterStarts.assertStoredAsClientStores("Execution", "executionId", ids[0]!, ids[1]!)
          assert.strictEqual(own.processed, true)
        }).pipe(Effect.orDie),
      { timeout: 30_000 }
    )

    it.effect(
      "runs that start together begin in one statement, each with its own definition and events, in order",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const repo = yield* ExecutionsRepo
          const { account, orchestrationId, steps } = yield* TestServer.oneStepOrchestration("local")
          const accepted = yield* Effect.forEach(
            Array.from({ length: 12 }, (_, i) => `begin ${i}`),
            (input) => unkeyed(account.tenantId, orchestrationId, steps, input),
            { concurrency: "unbounded" }
          )
          const ids = accepted.map((row) => row.id)
          // Each twice at once, as a replayed start would: both see it running.
          const begun = yield* Effect.forEach([...ids, ...ids], (id) => repo.begin(id), { concurrency: "unbounded" })
          assert.deepStrictEqual(
            begun.map((row) => [row.status, row.input]),
            [...ids, ...ids].map((_, i) => ["running", `begin ${i % 12}`])
          )
          const rows = yield* sql<{ id: string; status: string; writes: string }>`
          SELECT id, status, count(*) OVER (PARTITION BY xmin::text)::text AS writes FROM executions WHERE id IN ${sql.in(ids)}`
          assert.deepStrictEqual(
            rows.map((row) => row.status),
            ids.map(() => "running")
          )
          // Rows written by one statement (one transaction) share their xmin.
          assert.isAtLeast(Math.max(...rows.map((row) => Number(row.writes))), 6, "most of the 12 began together")
          const events = yield* sql<{ executionId: string; type: string }>`
          SELECT execution_id, type FROM execution_events WHERE execution_id IN ${sql.in(ids)} ORDER BY id`
          for (const id of ids) {
            assert.deepStrictEqual(
              events.filter((event) => event.executionId === id).map((event) => event.type),
              ["execution.running", "step.started"],
              "each run's start logged once, its own event first"
            )
          }
          // A finished run comes back as it is, and begins nothing.
          yield* repo.transition(ids[0]!, "completed", { output: "done", tokensUsed: 1 })
          const again = yield* Effect.forEach([ids[0]!, ids[1]!], (id) => repo.begin(id), { concurrency: "unbounded" })
          assert.deepStrictEqual(
            again.map((row) => row.status),
            ["completed", "running"]
          )
        }).pipe(Effect.orDie)
    )

    it.effect(
      "runs that finish together take their final statuses in one statement, each with its own events, in order",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const repo = yield* ExecutionsRepo
          const { account, orchestrationId, steps } = yield* TestServer.oneStepOrchestration("local")
          const hooked = yield* TestServer.oneStepOrchestration("local")
          // The second orchestration has a webhook (stored directly: its
          // delivery is not what this test is about).
          yield* sql`INSERT INTO webhook_endpoints (id, tenant_id, owner_kind, owner_id, url, secret)
          VALUES (${newId()}, ${hooked.account.tenantId}, 'orchestration', ${hooked.orchestrationId}, 'https://example.invalid/hook', 'secret')`
          const accept = (tenantId: string, orchestration: string, input: string) =>
            Effect.flatMap(unkeyed(tenantId, orchestration, steps, input), (row) =>
              Effect.as(repo.begin(row.id), row.id)
            )
          const ids = yield* Effect.forEach(
            Array.from({ length: 12 }, (_, i) => `finish ${i}`),
            (input) => accept(account.tenantId, orchestrationId, input),
            { concurrency: "unbounded" }
          )
          const hookedId = yield* accept(hooked.account.tenantId, hooked.orchestrationId, "hooked")
          // Half complete with their step's event, half fail; the first is
          // finished twice at once and the one with a webhook goes with them.
          const finals = [...ids.map((id, i) => ({ id, i })), { id: ids[0]!, i: 0 }]
          const moved = yield* Effect.all(
            [
              ...finals.map(({ i, id }) =>
                i % 2 === 0
                  ? repo.transition(id, "completed", {
                      output: `out ${i}`,
                      tokensUsed: i,
                      stepCompleted: { stepId: "s", data: { output: `out ${i}`, tokens: i } }
                    })
                  : repo.transition(id, "failed", { error: `error ${i}` })
              ),
              repo.transition(hookedId, "completed", { output: "hooked out", tokensUsed: 3 })
            ],
            { concurrency: "unbounded" }
          )
          // Each run moved once: of the two finals of the first, exactly one.
          assert.deepStrictEqual(moved.slice(1, 12), Array(11).fill(true))
          assert.deepStrictEqual([moved[0], moved[12]].filter(Boolean).length, 1)
          assert.isTrue(moved[13])
          const rows = yield* sql<{
            id: string
            status: string
            output: string | null
            error: string | null
            tokensUsed: number
            writes: string
          }>`
          SELECT id, status, output, error, tokens_used, count(*) OVER (PARTITION BY xmin::text)::text AS writes
          FROM executions WHERE id IN ${sql.in(ids)}`
          const byId = new Map(rows.map((row) => [row.id, row]))
          assert.deepStrictEqual(
            ids.map((id) => {
              const row = byId.get(id)!
              return [row.status, row.output, row.error, row.tokensUsed]
            }),
            ids.map((_, i) => (i % 2 === 0 ? ["completed", `out ${i}`, null, i] : ["failed", null, `error ${i}`, 0]))
          )
          // Rows written by one statement (one transaction) share their xmin.
          assert.isAtLeast(Math.max(...rows.map((row) => Number(row.writes))), 6, "most of the 12 finished together")
          const events = yield* sql<{ executionId: string; type: string; data: { output?: string } }>`
          SELECT execution_id, type, data FROM execution_events WHERE execution_id IN ${sql.in(ids)} ORDER BY id`
          ids.forEach((id, i) => {
            const own = events.filter((event) => event.executionId === id)
            assert.deepStrictEqual(
              own.map((event) => event.type),
              i % 2 === 0
                ? ["execution.running", "step.started", "step.completed", "execution.completed"]
                : ["execution.running", "step.started", "execution.failed"],
              "each run's final logged once, after its step's"
            )
            if (i % 2 === 0) assert.strictEqual(own[2]!.data.output, `out ${i}`)
          })
          // The run with a webhook finished with its webhook event (the outbox).
          const [hookedRow] = yield* sql<{
            status: string
            output: string
          }>`SELECT status, output FROM executions WHERE id = ${hookedId}`
          assert.deepStrictEqual([hookedRow!.status, hookedRow!.output], ["completed", "hooked out"])
          const outbox = yield* sql<{ type: string }>`SELECT type FROM webhook_events WHERE subject_id = ${hookedId}`
          assert.deepStrictEqual(
            outbox.map((event) => event.type),
            ["execution.completed"]
          )
          // A finished run never moves again.
          const late = yield* Effect.all(
            [
              repo.transition(ids[1]!, "completed", { output: "late" }),
              repo.transition(ids[2]!, "cancelled", { error: "Cancelled" })
            ],
            { concurrency: "unbounded" }
          )
          assert.deepStrictEqual(late, [false, false])
          const [still] = yield* sql<{ status: string }>`SELECT status FROM executions WHERE id = ${ids[1]!}`
          assert.strictEqual(still!.status, "failed")
        }).pipe(Effect.orDie)
    )
  })
})
