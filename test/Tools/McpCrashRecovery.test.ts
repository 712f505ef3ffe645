import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { awaitFinal, requestJson, signUpTenant } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeMcpServer from "../support/FakeMcpServer.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { type ServiceProcess, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// Durable mcp tool calls in an execution across a kill -9 of its node
// (docs/mcp.md, docs/tools.md): a tools/call in flight at the kill is made
// again by the node that resumes, with the same Idempotency-Key, over a
// session it must initialise afresh; a call that completed is never made again.

const prompt = "Echo the order id."
const echo = { id: "call_1", name: "shop__echo", arguments: { text: "A-1" } }

/** A tenant with the mcp tool `shop` on `mcpUrl`, an agent on the fake OpenAI given it, and one execution asking `prompt`. */
const startExecution = async (baseUrl: string, email: string, mcpUrl: string) => {
  const tenant = await signUpTenant(baseUrl, email)
  const tool = await requestJson(`${baseUrl}/api/tools`, {
    method: "POST",
    headers: tenant.session,
    body: {
      name: "shop",
      description: "The shop's MCP server.",
      parameters: { type: "object" },
      settings: { kind: "mcp", url: mcpUrl, allowedHosts: ["127.0.0.1"] },
      // A held call must outlast the kill and the restart: the test ends it, not its timeout.
      policy: { timeoutMs: 120_000 }
    }
  })
  assert.strictEqual(tool.kind, "mcp", JSON.stringify(tool))
  const agent = await requestJson(`${baseUrl}/api/agents`, {
    method: "POST",
    headers: tenant.session,
    body: { name: "Clerk", model: "openai/gpt-4o-mini", toolIds: [tool.id] }
  })
  const orchestration = await requestJson(`${baseUrl}/api/orchestrations`, {
    method: "POST",
    headers: tenant.session,
    body: { name: "Echo", steps: [{ id: "s", agentId: agent.id, prompt }] }
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
  // The MCP server is on loopback.
  WEBHOOK_ALLOW_PRIVATE: "true"
})

const toolCallsOf = (fake: { readonly received: ReadonlyArray<FakeMcpServer.Received> }) =>
  fake.received.filter((one) => one.method === "tools/call")

describe("durable mcp tool calls across a kill -9", () => {
  it.live(
    "a tools/call held at the server at the kill is made again with the same Idempotency-Key, and the execution completes",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestDatabaseUrl
          const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
          // The first tools/call is held unanswered: the kill lands while the server has it.
          const mcp = yield* FakeMcpServer.makeWith({ holdToolCalls: 1 })
          fake.script({ toolCalls: [echo] })
          fake.setDefault({ text: "The server echoed A-1." })
          const env = serviceEnv(databaseUrl, fake.url)

          const first = yield* spawnService(env)
          yield* waitReady(first)
          const { bearer, executionId } = yield* Effect.promise(() =>
            startExecution(first.baseUrl, "mcp-crash-during@example.com", mcp.url)
          )
          yield* Effect.promise(() =>
            eventually(() => assert.strictEqual(toolCallsOf(mcp).length, 1, "the tools/call reached the server"), {
              timeoutMs: 60_000
            })
          )
          const initialisedBefore = mcp.methods().filter((method) => method === "initialize").length
          yield* kill(first)
          // The killed node's connection went with it: the held call was never answered.
          yield* Effect.promise(() =>
            eventually(() => assert.strictEqual(mcp.closedByClient().length, 1, "the held tools/call closed"))
          )

          const second = yield* spawnService(env)
          yield* waitReady(second)
          const [final] = yield* Effect.promise(() => awaitFinal([second.baseUrl], bearer, [executionId], 90_000))
          assert.strictEqual(final.status, "completed", JSON.stringify(final))
          assert.strictEqual(final.output, "The server echoed A-1.")

          const calls = toolCallsOf(mcp)
          assert.strictEqual(calls.length, 2)
          assert.deepStrictEqual(
            calls.map((one) => one.headers["idempotency-key"]),
            Array(2).fill(`${executionId}:s:call_1`)
          )
          // The new node had no session: it initialised one before calling again.
          assert.strictEqual(mcp.methods().filter((method) => method === "initialize").length, initialisedBefore + 1)
          assert.notStrictEqual(calls[1]!.session, calls[0]!.session)
          // The model's reply asking for the call was kept before the call: replayed, not asked again.
          assert.strictEqual(fake.requests.filter((r) => r.body.messages.at(-1).role === "user").length, 1)
          const withResult = fake.requests.filter((r) => r.body.messages.at(-1).role === "tool")
          assert.strictEqual(withResult.length, 1)
          assert.include(withResult[0]!.body.messages.at(-1).content, "echo: A-1")

          const recorded = yield* Effect.promise(() =>
            requestJson(`${second.baseUrl}/api/v1/executions/${executionId}/tool-calls`, { headers: bearer })
          )
          assert.strictEqual(recorded.data.length, 1)
          assert.deepInclude(recorded.data[0], {
            callId: "call_1",
            tool: "shop__echo",
            status: "succeeded",
            attempts: 2,
            result: "echo: A-1"
          })
          yield* stop(second)
        })
      ),
    180_000
  )

  it.live(
    "a tools/call completed before the kill is never made again; the resumed run completes from its result",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestDatabaseUrl
          const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
          const mcp = yield* FakeMcpServer.make
          // The model asks for the call; its next turn (reading the result) is held: the kill lands there.
          fake.script({ toolCalls: [echo] }, { hold: true, text: "held" })
          fake.setDefault({ text: "The server echoed A-1." })
          const env = serviceEnv(databaseUrl, fake.url)

          const first = yield* spawnService(env)
          yield* waitReady(first)
          const { bearer, executionId } = yield* Effect.promise(() =>
            startExecution(first.baseUrl, "mcp-crash-after@example.com", mcp.url)
          )
          const withResult = () => fake.requests.filter((r) => r.body.messages.at(-1).role === "tool")
          yield* Effect.promise(() =>
            eventually(() => assert.strictEqual(withResult().length, 1, "the turn after the call asked"), {
              timeoutMs: 60_000
            })
          )
          assert.strictEqual(toolCallsOf(mcp).length, 1)
          yield* kill(first)

          const second = yield* spawnService(env)
          yield* waitReady(second)
          const [final] = yield* Effect.promise(() => awaitFinal([second.baseUrl], bearer, [executionId], 90_000))
          assert.strictEqual(final.status, "completed", JSON.stringify(final))
          assert.strictEqual(final.output, "The server echoed A-1.")
          // The call was made once, by the first node; the kept result was given to the model again.
          assert.strictEqual(toolCallsOf(mcp).length, 1)
          assert.strictEqual(toolCallsOf(mcp)[0]!.headers["idempotency-key"], `${executionId}:s:call_1`)
          assert.strictEqual(withResult().length, 2)
          const again = withResult().at(-1)!
          assert.include(again.body.messages.at(-1).content, "echo: A-1")
          assert.strictEqual(again.body.messages.at(-1).tool_call_id, "call_1")
          assert.strictEqual(fake.requests.filter((r) => r.body.messages.at(-1).role === "user").length, 1)

          const recorded = yield* Effect.promise(() =>
            requestJson(`${second.baseUrl}/api/v1/executions/${executionId}/tool-calls`, { headers: bearer })
          )
          assert.strictEqual(recorded.data.length, 1)
          assert.deepInclude(recorded.data[0], {
            callId: "call_1",
            tool: "shop__echo",
            status: "succeeded",
            attempts: 1
          })
          yield* stop(second)
        })
      ),
    180_000
  )
})
