import { assert, describe, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { AppConfig } from "../../src/Config.ts"
import { Executions } from "../../src/Orchestrations/Executions.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The service with its sweeps, as `npm start` runs it, models on a fake OpenAI.
const withSweeps = Layer.unwrap(
  Effect.gen(function* () {
    const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
    return Executions.sweeper.pipe(
      Layer.provide(Executions.layer),
      Layer.provideMerge(
        TestServer.layer({
          openaiBaseUrl: openai.url,
          openaiApiKey: Option.some(Redacted.make(openaiKey)),
          modelTimeout: Duration.seconds(20),
          modelMaxRetries: 0,
          enforceDailyLimits: false
        })
      ),
      Layer.merge(Layer.succeed(FakeOpenAi, openai))
    )
  })
)

const rawSql = Effect.gen(function* () {
  const config = yield* AppConfig
  return yield* PgClient.make({ url: Option.getOrThrow(config.databaseUrl), maxConnections: 1 })
}).pipe(Effect.provide(Reactivity.layer))

const setUp = (model: string, timeoutMs?: number) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const key = yield* TestServer.createKey(account, ["execute", "read"])
    const agent = yield* TestServer.createAgent(account, { model })
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: TestServer.bearer(account.token),
      body: {
        name: "One",
        steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }],
        ...(timeoutMs ? { timeoutMs } : {})
      }
    })
    assert.strictEqual(created.status, 201, created.text)
    const auth = TestServer.bearer(key.key)
    const execute = (input: string, headers: Record<string, string> = {}) =>
      client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
        headers: { ...auth, ...headers },
        body: { input }
      })
    const waitFinal = (id: string, seconds = 20) =>
      eventually(
        Effect.map(client.request("GET", `/api/v1/executions/${id}`, { headers: auth }), (polled) => {
          assert.include(["completed", "failed", "cancelled"], polled.body.status, `execution ${id} finished`)
          return polled.body
        }),
        { timeoutMs: seconds * 1000, intervalMs: 100 }
      )
    return { execute, waitFinal }
  })

describe("executions whatever happens under them", () => {
  layer(withSweeps, { timeout: Duration.seconds(60), excludeTestServices: true })((it) => {
    it.effect("a model reply with NUL and a lone surrogate is stored (as U+FFFD) and the run completes", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        const { execute, waitFinal } = yield* setUp("openai/gpt-4o-mini")
        fake.script({ text: "before\u0000after \ud800!" })
        const started = yield* execute("nul")
        assert.strictEqual(started.status, 202, started.text)
        const execution = yield* waitFinal(started.body.executionId)
        assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
        assert.strictEqual(execution.output, "before\ufffdafter \ufffd!")
      })
    )

    it.effect("an execution whose workflow ended without moving it is failed at its timeout by the sweep", () =>
      Effect.gen(function* () {
        const { execute, waitFinal } = yield* setUp("local", 1_000)
        const started = yield* execute("stuck")
        assert.strictEqual(started.status, 202, started.text)
        const id = started.body.executionId as string
        assert.strictEqual((yield* waitFinal(id)).status, "completed")
        // What a workflow that recorded a defect as its result left behind:
        // the workflow is over, the read model still says running.
        const sql = yield* rawSql
        yield* sql`UPDATE executions SET status = 'running', output = NULL, completed_at = NULL WHERE id = ${id}`
        const execution = yield* waitFinal(id, 30)
        assert.strictEqual(execution.status, "failed")
        assert.strictEqual(execution.error, "The execution timed out after 1000 ms")
      })
    )

    it.effect("an idempotent replay reports the execution's current status", () =>
      Effect.gen(function* () {
        const { execute, waitFinal } = yield* setUp("local")
        const first = yield* execute("once", { "idempotency-key": "replay-1" })
        assert.strictEqual(first.status, 202, first.text)
        assert.strictEqual((yield* waitFinal(first.body.executionId)).status, "completed")
        const replay = yield* execute("once", { "idempotency-key": "replay-1" })
        assert.strictEqual(replay.status, 202, replay.text)
        assert.deepStrictEqual(replay.body, { ...first.body, status: "completed" })
      })
    )
  })
})

describe("an execute whose start is not confirmed in time", () => {
  layer(TestServer.layer({ clusterCallTimeout: Duration.zero }), { excludeTestServices: true })((it) => {
    it.effect("answers 503 with Retry-After and the stored execution's id, which then completes", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { key, orchestrationId } = yield* TestServer.oneStepOrchestration("local")
        const auth = TestServer.bearer(key)
        const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
          headers: auth,
          body: { input: "hello" }
        })
        assert.strictEqual(started.status, 503, started.text)
        assert.strictEqual(started.headers.get("content-type"), "application/problem+json")
        assert.isNotNull(started.headers.get("retry-after"))
        const id = started.body.executionId as string
        assert.isString(id)
        // (Polled slowly: the free plan allows 100 requests a day.)
        const status = yield* eventually(
          Effect.map(client.request("GET", `/api/v1/executions/${id}`, { headers: auth }), (polled) => {
            const status: string = polled.body.status
            if (status !== "completed") throw new Error(`the execution is ${status}`)
            return status
          }),
          { timeoutMs: 10_000, intervalMs: 250 }
        )
        assert.strictEqual(status, "completed")
      })
    )

    it.effect("a value Postgres refuses is a 400 problem, not a 500", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const created = yield* client.request("POST", "/api/agents", {
          headers: TestServer.bearer(account.token),
          body: { name: "bad\u0000name" }
        })
        assert.strictEqual(created.status, 400, created.text)
        assert.strictEqual(created.headers.get("content-type"), "application/problem+json")
      })
    )
  })
})
