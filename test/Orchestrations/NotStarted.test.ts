import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { Executions } from "../../src/Orchestrations/Executions.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// A cluster that never takes a start in time: every execute stores its
// execution, answers 503, and leaves the start to the service's own sweeps.
describe("executions whose start was not taken", () => {
  // The service with its sweeps, as `npm start` runs it.
  const withSweeps = Executions.sweeper.pipe(
    Layer.provide(Executions.layer),
    Layer.provideMerge(TestServer.layer({ clusterCallTimeout: Duration.zero }))
  )
  layer(withSweeps, { excludeTestServices: true })((it) => {
    it.effect("are started again within 10-15 s of being accepted, without a restart", () =>
      Effect.gen(function*() {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const { key } = yield* TestServer.createKey(account)
        const agent = yield* TestServer.createAgent(account, { model: "local" })
        const orchestration = yield* client.request("POST", "/api/orchestrations", {
          headers: TestServer.bearer(account.token),
          body: { name: "One", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }] }
        })
        const acceptedAt = Date.now()
        const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestration.body.id}/execute`, {
          headers: TestServer.bearer(key),
          body: { input: "hello" }
        })
        assert.strictEqual(started.status, 503)
        const listed = yield* client.request("GET", "/api/v1/executions", { headers: TestServer.bearer(key) })
        assert.strictEqual(listed.body.data.length, 1)
        const executionId: string = listed.body.data[0].id

        let status = "pending"
        while (Date.now() - acceptedAt < 25_000) {
          const polled = yield* client.request("GET", `/api/v1/executions/${executionId}`, { headers: TestServer.bearer(key) })
          status = polled.body.status
          if (status === "completed") break
          // Nothing starts it before it is 10 s old: the sweep at start ran before it existed.
          if (Date.now() - acceptedAt < 9_000) assert.strictEqual(status, "pending")
          yield* Effect.sleep("250 millis")
        }
        assert.strictEqual(status, "completed")
        const took = Date.now() - acceptedAt
        assert.isAtLeast(took, 10_000)
        assert.isAtMost(took, 20_000)
      }), { timeout: 40_000 })
  })
})
