import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey, type RecordedRequest } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// Retrying a failed or cancelled execution (docs/orchestrations.md#retrying):
// models on a fake OpenAI at loopback, made to fail a step and then recover.

const model = "openai/gpt-4o-mini"

/** The prompt a request to the fake carried (its last user message). */
const promptOf = (request: RecordedRequest): string => {
  const messages: ReadonlyArray<{ role: string; content: unknown }> = request.body?.messages ?? []
  const last = [...messages].reverse().find((message) => message.role === "user")
  return typeof last?.content === "string" ? last.content : JSON.stringify(last?.content ?? "")
}

/** A tenant with a key and an orchestration of `steps` (each `[id, prompt]`, each waiting for the one before). */
const setUp = (steps: ReadonlyArray<readonly [string, string]>, agentBody: Record<string, unknown> = { model }) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account, ["execute", "read"])
    const agent = yield* TestServer.createAgent(account, agentBody)
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: TestServer.bearer(account.token),
      body: {
        name: "Chain",
        steps: steps.map(([id, prompt], i) => ({
          id,
          agentId: agent.id,
          prompt,
          ...(i > 0 ? { dependsOn: [steps[i - 1]![0]] } : {})
        }))
      }
    })
    assert.strictEqual(created.status, 201, created.text)
    return { account, key, agentId: agent.id, orchestrationId: created.body.id as string }
  })

const api = (key: string) => {
  const auth = TestServer.bearer(key)
  return {
    execute: (orchestrationId: string, input: string, headers: Record<string, string> = {}) =>
      TestClient.use((client) =>
        client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
          headers: { ...auth, ...headers },
          body: { input }
        })
      ),
    retry: (id: string, headers: Record<string, string> = {}) =>
      TestClient.use((client) =>
        client.request("POST", `/api/v1/executions/${id}/retry`, { headers: { ...auth, ...headers } })
      ),
    get: (id: string) =>
      TestClient.use((client) => client.request("GET", `/api/v1/executions/${id}`, { headers: auth })),
    toolCalls: (id: string) =>
      TestClient.use((client) => client.request("GET", `/api/v1/executions/${id}/tool-calls`, { headers: auth })),
    /** The execution once final. */
    final: (id: string) =>
      eventually(
        Effect.map(
          TestClient.use((client) => client.request("GET", `/api/v1/executions/${id}`, { headers: auth })),
          (polled) => {
            assert.include(["completed", "failed", "cancelled"], polled.body.status, `execution ${id} finished`)
            return polled.body
          }
        ),
        { timeoutMs: 20_000, intervalMs: 50 }
      ),
    /** The events of a finished execution: `[type, stepId, carried]`. */
    events: (id: string) =>
      Effect.map(
        TestClient.use((client) => client.request("GET", `/api/v1/executions/${id}/events`, { headers: auth })),
        (stream) =>
          [...stream.text.matchAll(/^data: (.+)$/gm)]
            .map((match) => JSON.parse(match[1]!))
            .filter((event) => event.type.startsWith("step.") || event.type.startsWith("execution."))
            .map((event) => [event.type, event.stepId ?? null, event.carried === true] as const)
      )
  }
}

const tokensToday = (account: Account) =>
  Effect.map(
    TestClient.use((client) => client.request("GET", "/api/billing", { headers: TestServer.bearer(account.token) })),
    (status) => status.body.tokensUsedToday as number
  )

layer(TestServer.layerWithFakeOpenAi(openaiKey, { webhookAllowPrivate: true }), {
  excludeTestServices: true
})("retrying an execution", (it) => {
  describe("POST /api/v1/executions/{id}/retry", () => {
    it.effect(
      "a two-step execution whose second step failed, retried once the provider recovers: the first step is carried, its model not asked again",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          const { account, key, orchestrationId } = yield* setUp([
            ["draft", "Draft {{input}}"],
            ["polish", "Polish {{steps.draft.output}}"]
          ])
          const run = api(key)
          fake.script(
            { text: "a rough draft", usage: { input: 10, output: 5 } },
            { status: 500, message: "The provider is down" }
          )
          const started = yield* run.execute(orchestrationId, "the plan")
          assert.strictEqual(started.status, 202, started.text)
          const firstId = started.body.executionId as string
          const failed = yield* run.final(firstId)
          assert.strictEqual(failed.status, "failed", JSON.stringify(failed))
          assert.include(failed.error, "polish")
          assert.notProperty(failed, "retryOf")
          assert.deepStrictEqual(fake.requests.map(promptOf), ["Draft the plan", "Polish a rough draft"])
          const spentBefore = yield* tokensToday(account)

          // The provider is back.
          fake.script({ text: "a polished draft", usage: { input: 7, output: 3 } })
          const retried = yield* run.retry(firstId)
          assert.strictEqual(retried.status, 202, retried.text)
          const retryId = retried.body.executionId as string
          assert.notStrictEqual(retryId, firstId)
          assert.deepStrictEqual(retried.body, { executionId: retryId, status: "pending", orchestrationId })
          const done = yield* run.final(retryId)
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.strictEqual(done.output, "a polished draft")
          // Only the failed step was asked again, on the carried step's output.
          assert.deepStrictEqual(fake.requests.map(promptOf), [
            "Draft the plan",
            "Polish a rough draft",
            "Polish a rough draft"
          ])
          assert.strictEqual(done.retryOf, firstId)
          assert.deepStrictEqual(done.carriedSteps, ["draft"])
          assert.strictEqual(done.carriedTokens, 15)
          assert.strictEqual(done.tokensUsed, 10, "only what the retry spent")
          // The day's tokens grew by the retry's own, not the carried step's again.
          assert.strictEqual((yield* tokensToday(account)) - spentBefore, 10)
          assert.deepStrictEqual(yield* run.events(retryId), [
            ["execution.running", null, false],
            ["step.completed", "draft", true],
            ["step.started", "polish", false],
            ["step.completed", "polish", false],
            ["execution.completed", null, false]
          ])
          // The execution retried is as it was; both are listed.
          const first = yield* run.get(firstId)
          assert.strictEqual(first.body.status, "failed")
          const listed = yield* TestClient.use((client) =>
            client.request("GET", `/api/v1/executions?orchestrationId=${orchestrationId}`, {
              headers: TestServer.bearer(key)
            })
          )
          assert.strictEqual(listed.status, 200, listed.text)
          assert.deepStrictEqual(
            listed.body.data.map((e: any) => [e.id, e.retryOf ?? null, e.carriedSteps ?? null]),
            [
              [retryId, firstId, ["draft"]],
              [firstId, null, null]
            ]
          )
          // A completed execution is not retried.
          const again = yield* run.retry(retryId)
          assert.strictEqual(again.status, 409, again.text)
          assert.strictEqual(again.headers.get("content-type"), "application/problem+json")
        })
    )

    it.effect(
      "the retry of a retry carries what the latest completed, its own carried steps included; the session route retries too",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          const { account, key, orchestrationId } = yield* setUp([
            ["a", "First {{input}}"],
            ["b", "Second {{steps.a.output}}"],
            ["c", "Third {{steps.b.output}}"]
          ])
          const run = api(key)
          fake.script(
            { text: "one", usage: { input: 4, output: 1 } },
            { status: 500 },
            // The first retry: b completes, c fails.
            { text: "two", usage: { input: 5, output: 2 } },
            { status: 503 },
            // The retry of the retry: c alone.
            { text: "three", usage: { input: 6, output: 3 } }
          )
          const started = yield* run.execute(orchestrationId, "go")
          const firstId = started.body.executionId as string
          assert.strictEqual((yield* run.final(firstId)).status, "failed")

          const retry1 = yield* run.retry(firstId)
          assert.strictEqual(retry1.status, 202, retry1.text)
          const retry1Id = retry1.body.executionId as string
          const failedAgain = yield* run.final(retry1Id)
          assert.strictEqual(failedAgain.status, "failed", JSON.stringify(failedAgain))
          assert.include(failedAgain.error, "c")
          assert.deepStrictEqual(failedAgain.carriedSteps, ["a"])
          assert.strictEqual(failedAgain.tokensUsed, 7)

          // With the dashboard's session this time.
          const retry2 = yield* TestClient.use((client) =>
            client.request("POST", `/api/executions/${retry1Id}/retry`, { headers: TestServer.bearer(account.token) })
          )
          assert.strictEqual(retry2.status, 202, retry2.text)
          const retry2Id = retry2.body.executionId as string
          const done = yield* run.final(retry2Id)
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.strictEqual(done.output, "three")
          assert.strictEqual(done.retryOf, retry1Id)
          assert.deepStrictEqual(done.carriedSteps, ["a", "b"])
          assert.strictEqual(done.carriedTokens, 5 + 7)
          assert.strictEqual(done.tokensUsed, 9)
          // Each step's model was asked until it answered, and never after.
          assert.deepStrictEqual(fake.requests.map(promptOf), [
            "First go",
            "Second one",
            "Second one",
            "Third two",
            "Third two"
          ])
          assert.deepStrictEqual(yield* run.events(retry2Id), [
            ["execution.running", null, false],
            ["step.completed", "a", true],
            ["step.completed", "b", true],
            ["step.started", "c", false],
            ["step.completed", "c", false],
            ["execution.completed", null, false]
          ])
        })
    )

    it.effect("a retry's final webhook event names the execution it retries (`retryOf`); the first's does not", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const fake = yield* FakeOpenAi
          fake.reset()
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          const { key } = yield* TestServer.createKey(account, ["execute", "read"])
          const agent = yield* TestServer.createAgent(account, { model })
          const created = yield* client.request("POST", "/api/orchestrations", {
            headers: TestServer.bearer(account.token),
            body: {
              name: "Hooked chain",
              steps: [
                { id: "a", agentId: agent.id, prompt: "One {{input}}" },
                { id: "b", agentId: agent.id, prompt: "Two {{steps.a.output}}", dependsOn: ["a"] }
              ],
              outputWebhookUrl: receiver.url("/hook")
            }
          })
          assert.strictEqual(created.status, 201, created.text)
          const run = api(key)
          fake.script({ text: "first" }, { status: 500 }, { text: "second" })
          const firstId = (yield* run.execute(created.body.id, "go")).body.executionId as string
          assert.strictEqual((yield* run.final(firstId)).status, "failed")
          const retried = yield* run.retry(firstId)
          assert.strictEqual(retried.status, 202, retried.text)
          const retryId = retried.body.executionId as string
          assert.strictEqual((yield* run.final(retryId)).status, "completed")

          /** The final event the receiver got for `id`, within a bound. */
          const eventOf = (id: string) =>
            eventually(
              Effect.sync(() => {
                const found = receiver.requests
                  .map((request) => JSON.parse(request.body) as { type: string; data: Record<string, unknown> })
                  .find((event) => event.data.id === id)
                assert.isDefined(found, `the event of ${id}`)
                return found!
              }),
              { timeoutMs: 10_000 }
            )
          const first = yield* eventOf(firstId)
          assert.strictEqual(first.type, "execution.failed")
          assert.notProperty(first.data, "retryOf")
          assert.notProperty(first.data, "carriedSteps")
          const retry = yield* eventOf(retryId)
          assert.strictEqual(retry.type, "execution.completed")
          assert.strictEqual(retry.data.retryOf, firstId)
          // The execution as GET shows it, what it carried included.
          assert.deepStrictEqual(retry.data, (yield* run.get(retryId)).body)
          assert.deepStrictEqual(retry.data.carriedSteps, ["a"])
        })
      )
    )

    it.effect("an Idempotency-Key answers with the same retry, and with another request is a 409", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { key, orchestrationId } = yield* setUp([
          ["a", "Alpha {{input}}"],
          ["b", "Beta {{steps.a.output}}"]
        ])
        const run = api(key)
        fake.script({ text: "x" }, { status: 500 }, { text: "y" }, { status: 500 })
        const firstId = (yield* run.execute(orchestrationId, "1")).body.executionId as string
        assert.strictEqual((yield* run.final(firstId)).status, "failed")
        const otherId = (yield* run.execute(orchestrationId, "2")).body.executionId as string
        assert.strictEqual((yield* run.final(otherId)).status, "failed")

        const once = yield* run.retry(firstId, { "idempotency-key": "retry-once" })
        assert.strictEqual(once.status, 202, once.text)
        const retryId = once.body.executionId as string
        assert.strictEqual((yield* run.final(retryId)).status, "completed")
        const replay = yield* run.retry(firstId, { "idempotency-key": "retry-once" })
        assert.strictEqual(replay.status, 202, replay.text)
        assert.deepStrictEqual(replay.body, { executionId: retryId, status: "completed", orchestrationId })
        // The same key for another execution's retry, or for an execute, is another request.
        const otherRetry = yield* run.retry(otherId, { "idempotency-key": "retry-once" })
        assert.strictEqual(otherRetry.status, 409, otherRetry.text)
        const execute = yield* run.execute(orchestrationId, "1", { "idempotency-key": "retry-once" })
        assert.strictEqual(execute.status, 409, execute.text)
        // One retry was made, whose one model call was the failed step's.
        const listed = yield* TestClient.use((client) =>
          client.request("GET", `/api/v1/executions?orchestrationId=${orchestrationId}`, {
            headers: TestServer.bearer(key)
          })
        )
        assert.strictEqual(listed.body.total, 3)
        assert.deepStrictEqual(fake.requests.map(promptOf), ["Alpha 1", "Beta x", "Alpha 2", "Beta y", "Beta x"])
      })
    )

    it.effect(
      "409 on an execution still running and once its orchestration changed shape; a cancelled one is retried",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          const { account, key, agentId, orchestrationId } = yield* setUp([
            ["a", "Hold {{input}}"],
            ["b", "Then {{steps.a.output}}"]
          ])
          const run = api(key)
          fake.script({ text: "held" }, { hold: true })
          const id = (yield* run.execute(orchestrationId, "on")).body.executionId as string
          // Step b is asking its model.
          yield* TestServer.waitFor(
            "step b's model call",
            Effect.sync(() => (fake.open === 1 ? true : undefined))
          )
          const running = yield* run.retry(id)
          assert.strictEqual(running.status, 409, running.text)
          assert.include(running.body.detail, "running")
          const cancelled = yield* TestClient.use((client) =>
            client.request("POST", `/api/v1/executions/${id}/cancel`, { headers: TestServer.bearer(key) })
          )
          assert.strictEqual(cancelled.status, 202, cancelled.text)
          assert.strictEqual((yield* run.final(id)).status, "cancelled")

          // Its steps renamed: refused, naming the first that differs.
          const session = TestServer.bearer(account.token)
          const renamed = yield* TestClient.use((client) =>
            client.request("PUT", `/api/orchestrations/${orchestrationId}`, {
              headers: session,
              body: {
                steps: [
                  { id: "a", agentId, prompt: "Hold {{input}}" },
                  { id: "b2", agentId, prompt: "Then {{steps.a.output}}", dependsOn: ["a"] }
                ]
              }
            })
          )
          assert.strictEqual(renamed.status, 200, renamed.text)
          const changed = yield* run.retry(id)
          assert.strictEqual(changed.status, 409, changed.text)
          assert.strictEqual(changed.body.stepId, "b")
          assert.strictEqual(changed.body.type, "urn:agent-host:problem:orchestration-changed")

          // Back to the steps it ran (prompts may differ: the execution's own are used): retried.
          const restored = yield* TestClient.use((client) =>
            client.request("PUT", `/api/orchestrations/${orchestrationId}`, {
              headers: session,
              body: {
                steps: [
                  { id: "a", agentId, prompt: "Hold it {{input}}" },
                  { id: "b", agentId, prompt: "Then it {{steps.a.output}}", dependsOn: ["a"] }
                ]
              }
            })
          )
          assert.strictEqual(restored.status, 200, restored.text)
          fake.script({ text: "fine" })
          const retried = yield* run.retry(id)
          assert.strictEqual(retried.status, 202, retried.text)
          const done = yield* run.final(retried.body.executionId)
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.deepStrictEqual(done.carriedSteps, ["a"])
          assert.strictEqual(promptOf(fake.requests[fake.requests.length - 1]!), "Then held")

          // Deleted: refused; another tenant's or an unknown id: 404.
          const other = yield* TestServer.signUp()
          const otherKey = yield* TestServer.createKey(other, ["execute", "read"])
          const foreign = yield* api(otherKey.key).retry(id)
          assert.strictEqual(foreign.status, 404, foreign.text)
          assert.strictEqual((yield* run.retry("nope")).status, 404)
          const removed = yield* TestClient.use((client) =>
            client.request("DELETE", `/api/orchestrations/${orchestrationId}`, { headers: session })
          )
          assert.strictEqual(removed.status, 204, removed.text)
          const deleted = yield* run.retry(id)
          assert.strictEqual(deleted.status, 409, deleted.text)
          assert.include(deleted.body.detail, "deleted")
        })
    )

    it.effect("the carried step's tool calls are shown on the retry, marked carried, and not made again", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const fake = yield* FakeOpenAi
          fake.reset()
          const receiver = yield* FakeReceiver.make
          receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
          const account = yield* TestServer.signUp()
          const { key } = yield* TestServer.createKey(account, ["execute", "read"])
          const session = TestServer.bearer(account.token)
          const tool = yield* client.request("POST", "/api/tools", {
            headers: session,
            body: lookupTool(receiver.url("/orders/{{args.id}}"))
          })
          assert.strictEqual(tool.status, 201, tool.text)
          const looker = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
          const writer = yield* TestServer.createAgent(account, { model })
          const created = yield* client.request("POST", "/api/orchestrations", {
            headers: session,
            body: {
              name: "Look, then write",
              steps: [
                { id: "look", agentId: looker.id, prompt: 'call lookup_order {"id": "{{input}}"}' },
                { id: "write", agentId: writer.id, prompt: "Write {{steps.look.output}}", dependsOn: ["look"] }
              ]
            }
          })
          assert.strictEqual(created.status, 201, created.text)
          const run = api(key)
          fake.script({ status: 500 }, { text: "written" })
          const firstId = (yield* run.execute(created.body.id, "A-1")).body.executionId as string
          assert.strictEqual((yield* run.final(firstId)).status, "failed")
          const retryId = (yield* run.retry(firstId)).body.executionId as string
          const done = yield* run.final(retryId)
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.deepStrictEqual(done.carriedSteps, ["look"])
          assert.strictEqual(receiver.requests.length, 1, "the tool was called once, by the first execution")

          const original = yield* run.toolCalls(firstId)
          assert.strictEqual(original.body.data.length, 1)
          assert.notProperty(original.body.data[0], "carried")
          const listed = yield* run.toolCalls(retryId)
          assert.strictEqual(listed.status, 200, listed.text)
          assert.strictEqual(listed.body.data.length, 1)
          assert.deepInclude(listed.body.data[0], {
            callId: "local_call_1",
            tool: "lookup_order",
            scope: "look",
            status: "succeeded",
            carried: true
          })
          const one = yield* client.request("GET", `/api/v1/executions/${retryId}/steps/look/tool-calls/local_call_1`, {
            headers: TestServer.bearer(key)
          })
          assert.strictEqual(one.status, 200, one.text)
          assert.strictEqual(one.body.carried, true)
          assert.include(one.body.fullResult, "shipped")
        })
      )
    )
  })
})
