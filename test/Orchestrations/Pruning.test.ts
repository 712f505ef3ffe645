import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { Executions } from "../../src/Orchestrations/Executions.ts"
import { ExecutionWorkflow } from "../../src/Orchestrations/ExecutionWorkflow.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"
import { TestClient } from "../support/TestServer.ts"

// Finished executions' workflow messages are due at once (retention zero).
const withFake = Layer.unwrap(
  Effect.gen(function* () {
    const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
    return Executions.layer.pipe(
      Layer.provideMerge(
        TestServer.layer({
          openaiBaseUrl: openai.url,
          openaiApiKey: Option.some(Redacted.make(openaiKey)),
          modelTimeout: Duration.seconds(20),
          modelMaxRetries: 0,
          executionMessagesRetention: Duration.zero,
          // The hanging step holds its node's shutdown this long at most.
          shutdownGrace: Duration.seconds(1)
        })
      ),
      Layer.merge(Layer.succeed(FakeOpenAi, openai))
    )
  })
)

/** Stored cluster messages and replies of an execution's workflow. */
const storedFor = (executionId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const entityId = yield* ExecutionWorkflow.executionId({ executionId })
    const [row] = yield* sql<{ messages: number; replies: number }>`
      SELECT (SELECT count(*)::int FROM cluster_messages WHERE entity_id = ${entityId}) AS messages,
             (SELECT count(*)::int FROM cluster_replies WHERE request_id IN
               (SELECT id FROM cluster_messages WHERE entity_id = ${entityId})) AS replies`
    return row!
  })

describe("pruning finished executions' workflow messages", () => {
  layer(withFake, { excludeTestServices: true })((it) => {
    it.effect(
      "deletes the stored messages of finished executions only, keeping their results",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const fake = yield* FakeOpenAi
          const executions = yield* Executions
          fake.script({ hang: true })
          fake.setDefault({ text: "done" })
          const { key, orchestrationId } = yield* TestServer.oneStepOrchestration("openai/gpt-4o-mini")
          const execute = (input: string) =>
            client
              .request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
                headers: TestServer.bearer(key),
                body: { input }
              })
              .pipe(Effect.map((started) => started.body.executionId as string))
          const poll = (id: string) =>
            client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key) })

          // One execution whose step hangs at the model, then one that completes.
          const unfinished = yield* execute("hang")
          yield* eventually(
            Effect.sync(() => assert.isAbove(fake.requests.length, 0, "the hanging step reached the model")),
            {
              intervalMs: 20
            }
          )
          const finished = yield* execute("finish")
          yield* eventually(
            Effect.map(poll(finished), (polled) => assert.strictEqual(polled.body.status, "completed")),
            {
              timeoutMs: 10_000
            }
          )
          // The read model says completed a moment before the workflow's own reply is stored.
          const sql = yield* SqlClient.SqlClient
          const before = yield* TestServer.waitFor(
            "the finished workflow's reply",
            storedFor(finished).pipe(
              Effect.map((stored) => (stored.replies > 0 ? stored : undefined)),
              Effect.orDie,
              Effect.provideService(SqlClient.SqlClient, sql)
            )
          )
          assert.isAbove(before.messages, 0)
          const unfinishedBefore = yield* storedFor(unfinished)
          assert.isAbove(unfinishedBefore.messages, 0)

          assert.strictEqual(yield* executions.prune, 1)
          assert.deepStrictEqual(yield* storedFor(finished), { messages: 0, replies: 0 })
          assert.deepStrictEqual(yield* storedFor(unfinished), unfinishedBefore)
          // The result is the read model's, untouched.
          const read = yield* poll(finished)
          assert.strictEqual(read.body.status, "completed")
          assert.strictEqual(read.body.output, "done")
          assert.strictEqual((yield* poll(unfinished)).body.status, "running")
          // Pruned executions are not taken again.
          assert.strictEqual(yield* executions.prune, 0)
        }),
      { timeout: 30_000 }
    )
  })
})

describe("pruning a finished execution's tool loop", () => {
  layer(
    Executions.layer.pipe(
      Layer.provideMerge(TestServer.layer({ webhookAllowPrivate: true, executionMessagesRetention: Duration.zero }))
    ),
    { excludeTestServices: true }
  )((it) => {
    it.effect("deletes the loop's kept replies with the workflow's messages, and keeps the calls' records", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const executions = yield* Executions
          const sql = yield* SqlClient.SqlClient
          const receiver = yield* FakeReceiver.make
          receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
          const account = yield* TestServer.signUp()
          const { key } = yield* TestServer.createKey(account, ["execute", "read"])
          const tool = yield* client.request("POST", "/api/tools", {
            headers: TestServer.bearer(account.token),
            body: lookupTool(receiver.url("/orders/{{args.id}}"))
          })
          assert.strictEqual(tool.status, 201, tool.text)
          const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
          const orchestration = yield* client.request("POST", "/api/orchestrations", {
            headers: TestServer.bearer(account.token),
            body: { name: "Lookup", steps: [{ id: "s", agentId: agent.id, prompt: 'call lookup_order {"id": "A-1"}' }] }
          })
          assert.strictEqual(orchestration.status, 201, orchestration.text)
          const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestration.body.id}/execute`, {
            headers: TestServer.bearer(key),
            body: { input: "x" }
          })
          assert.strictEqual(started.status, 202, started.text)
          const id = started.body.executionId as string
          yield* eventually(
            Effect.map(
              client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key) }),
              (polled) => assert.strictEqual(polled.body.status, "completed", polled.text)
            ),
            { timeoutMs: 10_000 }
          )
          const kept = () =>
            sql<{ turns: number; calls: number }>`SELECT
                (SELECT count(*)::int FROM tool_loop_turns WHERE run_id = ${id}) AS turns,
                (SELECT count(*)::int FROM tool_calls WHERE run_id = ${id}) AS calls`.pipe(
              Effect.map((rows) => rows[0]!)
            )
          // The reply that asked for the call was kept (the answer after it is not).
          assert.deepStrictEqual(yield* kept(), { turns: 1, calls: 1 })
          yield* eventually(
            Effect.gen(function* () {
              yield* executions.prune
              assert.deepStrictEqual(yield* kept(), { turns: 0, calls: 1 })
            }),
            { timeoutMs: 10_000 }
          )
        })
      )
    )
  })
})
