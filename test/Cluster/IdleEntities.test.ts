import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Sharding from "effect/cluster/Sharding"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// A finished workflow's entity leaves memory after the sharding's idle time
// (2 s, Cluster.ts), at the entity reaper's next tick (every 5 s), rather than
// after the 10 s effect's workflow engine would give it.
layer(TestServer.layer(), { excludeTestServices: true })("workflow entities", (it) => {
  it.effect(
    "a finished run's entity leaves memory within the sharding's idle time and one reaper tick",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const sharding = yield* Sharding.Sharding
        const { key, orchestrationId } = yield* TestServer.oneStepOrchestration("local")
        const accepted = yield* client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
          headers: TestServer.bearer(key),
          body: { input: "hello" }
        })
        assert.strictEqual(accepted.status, 202)
        const id = accepted.body.executionId as string
        yield* TestServer.waitFor(
          "the execution to complete",
          Effect.map(
            client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key) }),
            (polled) => (polled.body.status === "completed" ? true : undefined)
          )
        )
        const finishedAt = Date.now()
        assert.isAtLeast(yield* sharding.activeEntityCount, 1, "the run's entity is in memory when it finishes")
        yield* TestServer.waitFor(
          "the entity to leave memory",
          Effect.map(sharding.activeEntityCount, (count) => (count === 0 ? true : undefined)),
          9_500
        )
        assert.isBelow(Date.now() - finishedAt, 10_000, "sooner than effect's own 10 s")
      }),
    { timeout: 30_000 }
  )
})
