import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { newId, TenantId } from "../../src/Domain/Ids.ts"
import { Executions } from "../../src/Orchestrations/Executions.ts"
import { ExecutionsRepo } from "../../src/Orchestrations/ExecutionsRepo.ts"
import * as DurableRuns from "../../src/Runtime/DurableRuns.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The service with its sweeps, as `npm start` runs it.
const withSweeps = Executions.sweeper.pipe(
  Layer.provide(Executions.layer),
  Layer.provideMerge(ExecutionsRepo.layer),
  Layer.provideMerge(TestServer.layer())
)

describe("executions stored without their start (a crash in between)", () => {
  layer(withSweeps, { excludeTestServices: true })((it) => {
    it.effect(
      "are started 10-15 s after being accepted, without a restart",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const repo = yield* ExecutionsRepo
          const { account, key, orchestrationId, steps } = yield* TestServer.oneStepOrchestration("local")
          // What execute stores before it hands the start to the cluster.
          const acceptedAt = Date.now()
          const stored = yield* repo.insert({
            id: newId(),
            tenantId: TenantId.make(account.tenantId),
            orchestrationId,
            input: "hello",
            variables: {},
            steps,
            timeoutMs: 60_000,
            idempotencyKey: null,
            requestHash: null
          })

          // Nothing starts it before it is 10 s old: the sweep at start ran before it existed.
          const earlyStatuses: Array<string> = []
          const status = yield* eventually(
            Effect.map(
              client.request("GET", `/api/v1/executions/${stored.id}`, { headers: TestServer.bearer(key) }),
              (polled) => {
                const status: string = polled.body.status
                if (Date.now() - acceptedAt < 9_000 && status !== "pending") earlyStatuses.push(status)
                if (status !== "completed") throw new Error(`the execution is ${status}`)
                return status
              }
            ),
            { timeoutMs: 25_000, intervalMs: 250 }
          )
          assert.deepStrictEqual(earlyStatuses, [], "statuses before it was 9 s old, other than pending")
          assert.strictEqual(status, "completed")
          const took = Date.now() - acceptedAt
          assert.isAtLeast(took, 10_000)
          assert.isAtMost(took, 20_000)
        }),
      { timeout: 40_000 }
    )
  })
})

describe("an execute whose answer gives up on the cluster", () => {
  layer(TestServer.layer({ clusterCallTimeout: Duration.zero }), { excludeTestServices: true })((it) => {
    it.effect("answers 503, and the start it handed over still goes out: the run completes without any sweep", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { key, orchestrationId } = yield* TestServer.oneStepOrchestration("local")
        const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
          headers: TestServer.bearer(key),
          body: { input: "hello" }
        })
        assert.strictEqual(started.status, 503)
        const listed = yield* client.request("GET", "/api/v1/executions", { headers: TestServer.bearer(key) })
        const id: string = listed.body.data[0].id
        // This layer runs no sweeps at all: only the handed-over start can run it.
        // (Polled slowly: the free plan allows 100 requests a day.)
        const status = yield* eventually(
          Effect.map(
            client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key) }),
            (polled) => {
              const status: string = polled.body.status
              if (status !== "completed") throw new Error(`the execution is ${status}`)
              return status
            }
          ),
          { timeoutMs: 10_000, intervalMs: 250 }
        )
        assert.strictEqual(status, "completed")
      })
    )
  })
})

describe("a backlog of executions not started", () => {
  layer(ExecutionsRepo.layer.pipe(Layer.provideMerge(TestServer.layer())), { excludeTestServices: true })((it) => {
    it.effect("is nudged the oldest first, at most nudgeLimit at a time", () =>
      Effect.gen(function* () {
        const repo = yield* ExecutionsRepo
        const sql = yield* SqlClient.SqlClient
        const { account, orchestrationId, steps } = yield* TestServer.oneStepOrchestration("local")
        const count = DurableRuns.nudgeLimit + 5
        const ids: Array<string> = []
        for (let i = 0; i < count; i++) {
          const stored = yield* repo.insert({
            id: newId(),
            tenantId: TenantId.make(account.tenantId),
            orchestrationId,
            input: `run ${i}`,
            variables: {},
            steps,
            timeoutMs: 60_000,
            idempotencyKey: null,
            requestHash: null
          })
          ids.push(stored.id)
        }
        // Accepted a second apart, long ago, in the reverse of their insertion order.
        for (const [i, id] of ids.entries()) {
          yield* sql`UPDATE executions SET created_at = '2020-01-01T00:00:00Z'::timestamptz + make_interval(secs => ${count - i})
            WHERE id = ${id}`
        }
        const oldestFirst = [...ids].reverse()
        assert.deepStrictEqual(
          yield* repo.notStarted(10, DurableRuns.nudgeLimit),
          oldestFirst.slice(0, DurableRuns.nudgeLimit)
        )
        assert.deepStrictEqual(yield* repo.notStarted(10, count + 100), oldestFirst)
      })
    )
  })
})
