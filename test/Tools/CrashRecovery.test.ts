import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { awaitFinal, requestJson, signUpTenant } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { type ServiceProcess, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// Durable tool calls in an execution across a kill -9 of its node
// (docs/tools.md): a call that completed is never made again, its stored
// result is replayed; a call in flight at the kill is made again, with the
// same Idempotency-Key.

const prompt = "Where is order A-1?"
const lookup = { id: "call_1", name: "lookup_order", arguments: { id: "A-1" } }

/**
 * A tenant with an http tool on `receiverUrl`, an agent on the fake OpenAI
 * given it, a one-step orchestration asking `prompt`, and one execution of it.
 */
const startExecution = async (baseUrl: string, email: string, receiverUrl: string) => {
  const tenant = await signUpTenant(baseUrl, email)
  const tool = await requestJson(`${baseUrl}/api/tools`, {
    method: "POST",
    headers: tenant.session,
    body: {
      ...lookupTool(receiverUrl),
      // A held call must outlast the kill and the restart: the test ends it, not its timeout.
      policy: { timeoutMs: 120_000 }
    }
  })
  const agent = await requestJson(`${baseUrl}/api/agents`, {
    method: "POST",
    headers: tenant.session,
    body: { name: "Clerk", model: "openai/gpt-4o-mini", toolIds: [tool.id] }
  })
  const orchestration = await requestJson(`${baseUrl}/api/orchestrations`, {
    method: "POST",
    headers: tenant.session,
    body: { name: "Lookup", steps: [{ id: "s", agentId: agent.id, prompt }] }
  })
  const started = await requestJson(`${baseUrl}/api/v1/orchestrations/${orchestration.id}/execute`, {
    method: "POST",
    headers: tenant.bearer,
    body: { input: "A-1" }
  })
  return { bearer: tenant.bearer, executionId: started.executionId as string }
}

const kill = (service: ServiceProcess) =>
  Effect.promise(async () => {
    service.child.kill("SIGKILL")
    await service.exited
  })

const stop = (service: ServiceProcess) =>
  Effect.promise(async () => {
    service.child.kill("SIGTERM")
    await service.exited
  })

const serviceEnv = (databaseUrl: string, fakeUrl: string) => ({
  DATABASE_URL: databaseUrl,
  OPENAI_BASE_URL: fakeUrl,
  OPENAI_API_KEY: openaiKey,
  ENFORCE_DAILY_LIMITS: "false",
  // The receiver is on loopback.
  WEBHOOK_ALLOW_PRIVATE: "true"
})

describe("durable tool calls across a kill -9", () => {
  it.live(
    "a call completed before the kill is never made again, nor is the model turn that asked for it",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        const receiver = yield* FakeReceiver.make
        receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
        // The model asks for the call; its next turn (reading the result) is held: the kill lands there.
        fake.script({ toolCalls: [lookup] }, { hold: true, text: "held" })
        fake.setDefault({ text: "A-1 has shipped." })
        const env = serviceEnv(databaseUrl, fake.url)

        const first = yield* spawnService(env)
        yield* waitReady(first)
        const { bearer, executionId } = yield* Effect.promise(() =>
          startExecution(first.baseUrl, "tool-crash-after@example.com", receiver.url("/orders/{{args.id}}"))
        )
        const askedFirstTurn = () => fake.requests.filter((r) => r.body.messages.at(-1).role === "user")
        const askedWithResult = () => fake.requests.filter((r) => r.body.messages.at(-1).role === "tool")
        yield* Effect.promise(() =>
          eventually(() => assert.strictEqual(askedWithResult().length, 1, "the turn after the call asked"), {
            timeoutMs: 60_000
          })
        )
        assert.strictEqual(receiver.requests.length, 1)
        assert.strictEqual(askedFirstTurn().length, 1)
        yield* kill(first)

        const second = yield* spawnService(env)
        yield* waitReady(second)
        const readyAt = Date.now()
        const [final] = yield* Effect.promise(() => awaitFinal([second.baseUrl], bearer, [executionId], 90_000))
        console.log(
          `%s: the execution completed %d ms after the new node was ready`,
          "kill -9 after the call",
          Date.now() - readyAt
        )
        assert.strictEqual(final.status, "completed", JSON.stringify(final))
        assert.strictEqual(final.output, "A-1 has shipped.")
        // The call was made once; the model's reply that asked for it was replayed, not asked again.
        assert.strictEqual(receiver.requests.length, 1)
        assert.strictEqual(askedFirstTurn().length, 1)
        // Only the turn that was in flight was asked again, with the kept result.
        assert.strictEqual(askedWithResult().length, 2)
        const [again] = askedWithResult().slice(-1)
        assert.include(again!.body.messages.at(-1).content, "shipped")
        assert.strictEqual(again!.body.messages.at(-1).tool_call_id, "call_1")

        const calls = yield* Effect.promise(() =>
          requestJson(`${second.baseUrl}/api/v1/executions/${executionId}/tool-calls`, { headers: bearer })
        )
        assert.strictEqual(calls.data.length, 1)
        assert.deepInclude(calls.data[0], { callId: "call_1", status: "succeeded", attempts: 1 })
        yield* stop(second)
      }),
    180_000
  )

  it.live(
    "a call in flight at the kill is made again with the same Idempotency-Key, and the execution completes",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        const receiver = yield* FakeReceiver.make
        // The first request is held unanswered: the kill lands while the receiver has it.
        receiver.script({ hold: true }, { body: JSON.stringify({ id: "A-1", status: "shipped" }) })
        fake.script({ toolCalls: [lookup] })
        fake.setDefault({ text: "A-1 has shipped." })
        const env = serviceEnv(databaseUrl, fake.url)

        const first = yield* spawnService(env)
        yield* waitReady(first)
        const { bearer, executionId } = yield* Effect.promise(() =>
          startExecution(first.baseUrl, "tool-crash-during@example.com", receiver.url("/orders/{{args.id}}"))
        )
        yield* Effect.promise(() =>
          eventually(() => assert.strictEqual(receiver.requests.length, 1, "the call reached the receiver"), {
            timeoutMs: 60_000
          })
        )
        yield* kill(first)
        // The killed node's connection is gone with it: the held request was never answered.
        yield* Effect.promise(() =>
          eventually(() => assert.strictEqual(receiver.closedByClient.length, 1, "the held request closed"))
        )

        const second = yield* spawnService(env)
        yield* waitReady(second)
        const readyAt = Date.now()
        const [final] = yield* Effect.promise(() => awaitFinal([second.baseUrl], bearer, [executionId], 90_000))
        console.log(
          `%s: the execution completed %d ms after the new node was ready`,
          "kill -9 during the call",
          Date.now() - readyAt
        )
        assert.strictEqual(final.status, "completed", JSON.stringify(final))
        assert.strictEqual(final.output, "A-1 has shipped.")
        assert.strictEqual(receiver.requests.length, 2)
        assert.deepStrictEqual(
          receiver.requests.map((r) => [r.path, r.headers["idempotency-key"]]),
          Array(2).fill(["/orders/A-1", `${executionId}:s:call_1`])
        )
        // The model's reply asking for the call was kept before the call: replayed, not asked again.
        assert.strictEqual(fake.requests.filter((r) => r.body.messages.at(-1).role === "user").length, 1)
        assert.strictEqual(fake.requests.length, 2)

        const calls = yield* Effect.promise(() =>
          requestJson(`${second.baseUrl}/api/v1/executions/${executionId}/tool-calls`, { headers: bearer })
        )
        assert.strictEqual(calls.data.length, 1)
        assert.deepInclude(calls.data[0], { callId: "call_1", tool: "lookup_order", status: "succeeded", attempts: 2 })
        assert.include(calls.data[0].result, "shipped")
        yield* stop(second)
      }),
    180_000
  )
})
