import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { AgentId } from "../../src/Domain/Ids.ts"
import { BadRequest, Conflict, NotFound } from "../../src/Domain/Problems.ts"
import type { CreateOrchestration, ExecuteRequest } from "../../src/Orchestrations/Api.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const withFake = TestServer.layerWithFakeOpenAi(openaiKey)

const setUp = (orchestration: (agentId: AgentId) => Omit<CreateOrchestration, "name">) =>
  Effect.gen(function* () {
    const account = yield* TestServer.signUp()
    const key = yield* TestServer.createKey(account, ["execute", "read"])
    const api = yield* TestServer.apiClient(account.token)
    const keyApi = yield* TestServer.apiClient(key.key)
    const agent = yield* api.agents.create({
      payload: { name: "Helper", model: "openai/gpt-4o-mini", instructions: "Be useful." }
    })
    const created = yield* api.orchestrations.create({ payload: { name: "Flow", ...orchestration(agent.id) } })
    const execute = (payload: ExecuteRequest, headers: { readonly "idempotency-key"?: string } = {}) =>
      keyApi.v1Orchestrations.execute({ params: { id: created.id }, headers, payload })
    const poll = (id: string) => keyApi.v1Executions.get({ params: { id } })
    const waitFinal = (id: string) => {
      const seen = new Set<string>()
      return eventually(
        Effect.map(poll(id), (execution) => {
          seen.add(execution.status)
          assert.include(["completed", "failed", "cancelled"], execution.status, "the execution finished")
          return { execution, seen }
        }),
        { timeoutMs: 10_000 }
      )
    }
    return {
      account,
      key: key.key,
      keyApi,
      agentId: agent.id,
      orchestrationId: created.id,
      execute,
      poll,
      waitFinal
    }
  })

const threeSteps = (agentId: AgentId) => ({
  steps: [
    { id: "research", agentId, prompt: "Research {{input}} for {{variables.audience}}" },
    { id: "outline", agentId, prompt: "Outline {{input}}" },
    {
      id: "write",
      agentId,
      prompt: "Write from {{steps.research.output}} and {{steps.outline.output}}",
      dependsOn: ["research", "outline"]
    }
  ]
})

layer(withFake, { excludeTestServices: true })("executions", (it) => {
  describe("a three-step orchestration with a parallel pair", () => {
    it.effect("runs in the background; outputs flow through templates and tokens add up", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ delayMs: 150 })
        fake.script(
          { text: "R-facts", usage: { input: 10, output: 2 }, delayMs: 300 },
          { text: "O-plan", usage: { input: 5, output: 3 }, delayMs: 300 },
          { text: "Final text", usage: { input: 20, output: 4 } }
        )
        const { keyApi, orchestrationId, waitFinal } = yield* setUp(threeSteps)
        const [started, response] = yield* keyApi.v1Orchestrations.execute({
          params: { id: orchestrationId },
          headers: {},
          payload: { input: "otters", variables: { audience: "kids" } },
          responseMode: "decoded-and-response"
        })
        assert.strictEqual(response.status, 202)
        // The bytes as sent, not only what the client decodes: these three fields and no other.
        assert.deepStrictEqual(Object.keys((yield* response.json) as object).sort(), [
          "executionId",
          "orchestrationId",
          "status"
        ])
        assert.strictEqual(started.status, "pending")
        assert.strictEqual(started.orchestrationId, orchestrationId)
        const { execution, seen } = yield* waitFinal(started.executionId)
        assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
        assert.isTrue(seen.has("running"))
        assert.strictEqual(execution.output, "Final text")
        assert.isNull(execution.error)
        assert.strictEqual(execution.tokensUsed, 44)
        assert.strictEqual(execution.id, started.executionId)
        assert.isNotNull(execution.durationMs)
        assert.isAtLeast(execution.durationMs, 300)
        assert.instanceOf(execution.completedAt, Date)
        // The parallel pair takes the first two scripted replies in whichever order its requests arrive.
        const prompts = fake.requests.map((r) => r.body.messages[1].content)
        assert.sameMembers(prompts.slice(0, 2), ["Research otters for kids", "Outline otters"])
        const replyTo = (prefix: string) => ["R-facts", "O-plan"][prompts.findIndex((p) => p.startsWith(prefix))]
        assert.strictEqual(prompts[2], `Write from ${replyTo("Research")} and ${replyTo("Outline")}`)
      })
    )
  })

  describe("GET /api/v1/executions/{id}/events", () => {
    const readEvents = (baseUrl: string, key: string, id: string) =>
      Effect.promise(async () => {
        const response = await fetch(`${baseUrl}/api/v1/executions/${id}/events`, {
          headers: { authorization: `Bearer ${key}` }
        })
        const text = await response.text()
        return {
          status: response.status,
          contentType: response.headers.get("content-type"),
          events: text
            .trim()
            .split("\n\n")
            .map((block) => {
              const lines = Object.fromEntries(
                block.split("\n").map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 2)])
              )
              return { id: lines.id!, event: lines.event!, data: JSON.parse(lines.data!) }
            })
        }
      })

    it.effect("a client connected from the start sees the steps as they happen and the stream ends when final", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ delayMs: 200, text: "out" })
        const { execute, key, waitFinal } = yield* setUp(threeSteps)
        const client = yield* TestClient
        const started = yield* execute({ input: "x", variables: { audience: "y" } })
        const live = yield* readEvents(client.baseUrl, key, started.executionId)
        assert.strictEqual(live.status, 200)
        assert.match(live.contentType ?? "", /^text\/event-stream/)
        const types = live.events.map((e) => e.event)
        assert.strictEqual(types[0], "execution.running")
        assert.strictEqual(types[types.length - 1], "execution.completed")
        assert.strictEqual(types.filter((t) => t === "step.completed").length, 3)
        const write = live.events.find((e) => e.event === "step.completed" && e.data.stepId === "write")!
        assert.strictEqual(write.data.output, "out")
        // `write` starts only after both of its dependencies completed.
        const index = (event: string, stepId: string) =>
          live.events.findIndex((e) => e.event === event && e.data.stepId === stepId)
        assert.isAbove(index("step.started", "write"), index("step.completed", "research"))
        assert.isAbove(index("step.started", "write"), index("step.completed", "outline"))
        assert.strictEqual(live.events[live.events.length - 1]!.data.output, "out")

        yield* waitFinal(started.executionId)
        const late = yield* readEvents(client.baseUrl, key, started.executionId)
        assert.deepStrictEqual(late.events, live.events)
      })
    )

    it.effect("a one-step run logs its step's start and completion, then its own, in that order", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ text: "only out", usage: { input: 7, output: 4 } })
        const { execute, key, waitFinal } = yield* setUp((agentId) => ({
          steps: [{ id: "only", agentId, prompt: "Do {{input}}" }]
        }))
        const client = yield* TestClient
        const started = yield* execute({ input: "x" })
        yield* waitFinal(started.executionId)
        const { events } = yield* readEvents(client.baseUrl, key, started.executionId)
        assert.deepStrictEqual(
          events.map((e) => e.event),
          ["execution.running", "step.started", "step.completed", "execution.completed"]
        )
        assert.deepInclude(events[2]!.data, { stepId: "only", output: "only out", tokens: 11 })
        assert.deepInclude(events[3]!.data, { status: "completed", output: "only out", tokensUsed: 11 })
        const ids = events.map((e) => Number(e.id))
        assert.deepStrictEqual(
          ids,
          [...ids].sort((a, b) => a - b)
        )
      })
    )
  })

  describe("failures and control", () => {
    it.effect("a failing step fails the execution with a useful error", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({})
        fake.script({ status: 400, message: "Bad things", times: 2 })
        const { execute, waitFinal } = yield* setUp(threeSteps)
        const started = yield* execute({ input: "x", variables: { audience: "y" } })
        const { execution } = yield* waitFinal(started.executionId)
        assert.strictEqual(execution.status, "failed")
        assert.isNotNull(execution.error)
        assert.include(execution.error, "Bad things")
        assert.isNull(execution.output)
      })
    )

    it.effect("an execution past its timeout fails with a timeout error", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ hang: true })
        const { execute, waitFinal } = yield* setUp((agentId) => ({
          timeoutMs: 1000,
          steps: [{ id: "slow", agentId, prompt: "{{input}}" }]
        }))
        const started = yield* execute({ input: "x" })
        const { execution } = yield* waitFinal(started.executionId)
        fake.setDefault({})
        assert.strictEqual(execution.status, "failed")
        assert.isNotNull(execution.error)
        assert.match(execution.error, /timed out/)
      })
    )

    it.effect("cancel: a running execution becomes cancelled; a final one is a 409", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ hang: true })
        const { execute, keyApi, poll, waitFinal } = yield* setUp((agentId) => ({
          steps: [{ id: "slow", agentId, prompt: "{{input}}" }]
        }))
        const started = yield* execute({ input: "x" })
        const params = { id: started.executionId }
        yield* TestServer.waitFor(
          "the execution to run",
          Effect.map(poll(started.executionId), (execution) => (execution.status === "running" ? execution : undefined))
        )
        const cancelled = yield* keyApi.v1Executions.cancel({ params })
        assert.strictEqual(cancelled.status, "cancelled")
        const { execution } = yield* waitFinal(started.executionId)
        fake.setDefault({})
        assert.strictEqual(execution.status, "cancelled")
        const again = yield* Effect.flip(keyApi.v1Executions.cancel({ params }))
        assert.instanceOf(again, Conflict)
        assert.strictEqual((yield* poll(started.executionId)).status, "cancelled")
      })
    )

    it.effect("400 for a missing input or variable; 404 for another tenant's orchestration or execution", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({})
        const { execute, key, orchestrationId, waitFinal } = yield* setUp(threeSteps)
        const client = yield* TestClient
        // Raw: a body without its input is one the typed client refuses to send.
        const noInput = yield* client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
          headers: TestServer.bearer(key),
          body: { variables: { audience: "y" } }
        })
        assert.strictEqual(noInput.status, 400)
        assert.deepStrictEqual(noInput.body.errors[0].path, ["payload", "input"])
        const noVariable = yield* Effect.flip(execute({ input: "x" }))
        assert.instanceOf(noVariable, BadRequest)
        assert.deepStrictEqual(noVariable.errors?.[0]?.path, ["payload", "variables", "audience"])
        const started = yield* execute({ input: "x", variables: { audience: "y" } })
        yield* waitFinal(started.executionId)
        const stranger = yield* setUp(threeSteps)
        const foreignRun = yield* Effect.flip(
          stranger.keyApi.v1Orchestrations.execute({
            params: { id: orchestrationId },
            headers: {},
            payload: { input: "x", variables: { audience: "y" } }
          })
        )
        assert.instanceOf(foreignRun, NotFound)
        assert.instanceOf(yield* Effect.flip(stranger.poll(started.executionId)), NotFound)
      })
    )

    it.effect("Idempotency-Key: a replay returns the same execution; another body with it is a 409", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({})
        const { execute, keyApi, waitFinal } = yield* setUp(threeSteps)
        const body = { input: "x", variables: { audience: "y" } }
        const first = yield* execute(body, { "idempotency-key": "order-42" })
        const replay = yield* execute(body, { "idempotency-key": "order-42" })
        // The same execution, as it is now (it may have started already).
        assert.deepStrictEqual({ ...replay, status: first.status }, first)
        assert.oneOf(replay.status, ["pending", "running", "completed"])
        const conflict = yield* Effect.flip(execute({ ...body, input: "other" }, { "idempotency-key": "order-42" }))
        assert.instanceOf(conflict, Conflict)
        yield* waitFinal(first.executionId)
        const list = yield* keyApi.v1Executions.list({ query: {} })
        assert.strictEqual(list.total, 1)
        assert.strictEqual(fake.requests.length, 3)
      })
    )
  })
})
