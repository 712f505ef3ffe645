import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const withFake = TestServer.layerWithFakeOpenAi(openaiKey)

const setUp = (orchestration: (agentId: string) => Record<string, unknown>) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const key = yield* TestServer.createKey(account, ["execute", "read"])
    const agent = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini", instructions: "Be useful." })
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: TestServer.bearer(account.token),
      body: { name: "Flow", ...orchestration(agent.id) }
    })
    assert.strictEqual(created.status, 201, created.text)
    const auth = TestServer.bearer(key.key)
    const execute = (body: unknown, headers: Record<string, string> = {}) =>
      client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
        headers: { ...auth, ...headers },
        body
      })
    const poll = (id: string) => client.request("GET", `/api/v1/executions/${id}`, { headers: auth })
    const waitFinal = (id: string) => {
      const seen = new Set<string>()
      return eventually(
        Effect.map(poll(id), (response) => {
          seen.add(response.body.status)
          assert.include(["completed", "failed", "cancelled"], response.body.status, "the execution finished")
          return { execution: response.body, seen }
        }),
        { timeoutMs: 10_000 }
      )
    }
    return {
      account,
      key: key.key,
      agentId: agent.id,
      orchestrationId: created.body.id as string,
      execute,
      poll,
      waitFinal
    }
  })

const threeSteps = (agentId: string) => ({
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
        const { execute, orchestrationId, waitFinal } = yield* setUp(threeSteps)
        const started = yield* execute({ input: "otters", variables: { audience: "kids" } })
        assert.strictEqual(started.status, 202)
        assert.deepStrictEqual(Object.keys(started.body).sort(), ["executionId", "orchestrationId", "status"])
        assert.strictEqual(started.body.status, "pending")
        assert.strictEqual(started.body.orchestrationId, orchestrationId)
        const { execution, seen } = yield* waitFinal(started.body.executionId)
        assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
        assert.isTrue(seen.has("running"))
        assert.strictEqual(execution.output, "Final text")
        assert.isNull(execution.error)
        assert.strictEqual(execution.tokensUsed, 44)
        assert.strictEqual(execution.id, started.body.executionId)
        assert.isAtLeast(execution.durationMs, 300)
        assert.isString(execution.completedAt)
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
        const live = yield* readEvents(client.baseUrl, key, started.body.executionId)
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

        yield* waitFinal(started.body.executionId)
        const late = yield* readEvents(client.baseUrl, key, started.body.executionId)
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
        assert.strictEqual(started.status, 202, started.text)
        yield* waitFinal(started.body.executionId)
        const { events } = yield* readEvents(client.baseUrl, key, started.body.executionId)
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
        const { execution } = yield* waitFinal(started.body.executionId)
        assert.strictEqual(execution.status, "failed")
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
        const { execution } = yield* waitFinal(started.body.executionId)
        fake.setDefault({})
        assert.strictEqual(execution.status, "failed")
        assert.match(execution.error, /timed out/)
      })
    )

    it.effect("cancel: a running execution becomes cancelled; a final one is a 409", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ hang: true })
        const { execute, key, poll, waitFinal } = yield* setUp((agentId) => ({
          steps: [{ id: "slow", agentId, prompt: "{{input}}" }]
        }))
        const client = yield* TestClient
        const started = yield* execute({ input: "x" })
        yield* Effect.sleep("300 millis")
        const cancelled = yield* client.request("POST", `/api/v1/executions/${started.body.executionId}/cancel`, {
          headers: TestServer.bearer(key)
        })
        assert.strictEqual(cancelled.status, 202)
        assert.strictEqual(cancelled.body.status, "cancelled")
        const { execution } = yield* waitFinal(started.body.executionId)
        fake.setDefault({})
        assert.strictEqual(execution.status, "cancelled")
        const again = yield* client.request("POST", `/api/v1/executions/${started.body.executionId}/cancel`, {
          headers: TestServer.bearer(key)
        })
        assert.strictEqual(again.status, 409)
        assert.strictEqual((yield* poll(started.body.executionId)).body.status, "cancelled")
      })
    )

    it.effect("400 for a missing input or variable; 404 for another tenant's orchestration or execution", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({})
        const { execute, orchestrationId, waitFinal } = yield* setUp(threeSteps)
        const noInput = yield* execute({ variables: { audience: "y" } })
        assert.strictEqual(noInput.status, 400)
        assert.deepStrictEqual(noInput.body.errors[0].path, ["payload", "input"])
        const noVariable = yield* execute({ input: "x" })
        assert.strictEqual(noVariable.status, 400)
        assert.deepStrictEqual(noVariable.body.errors[0].path, ["payload", "variables", "audience"])
        const started = yield* execute({ input: "x", variables: { audience: "y" } })
        yield* waitFinal(started.body.executionId)
        const stranger = yield* setUp(threeSteps)
        const client = yield* TestClient
        const foreignRun = yield* client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
          headers: TestServer.bearer(stranger.key),
          body: { input: "x", variables: { audience: "y" } }
        })
        assert.strictEqual(foreignRun.status, 404)
        assert.strictEqual((yield* stranger.poll(started.body.executionId)).status, 404)
      })
    )

    it.effect("Idempotency-Key: a replay returns the same execution; another body with it is a 409", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({})
        const { execute, key, waitFinal } = yield* setUp(threeSteps)
        const body = { input: "x", variables: { audience: "y" } }
        const first = yield* execute(body, { "idempotency-key": "order-42" })
        const replay = yield* execute(body, { "idempotency-key": "order-42" })
        assert.strictEqual(replay.status, 202)
        // The same execution, as it is now (it may have started already).
        assert.deepStrictEqual({ ...replay.body, status: first.body.status }, first.body)
        assert.oneOf(replay.body.status, ["pending", "running", "completed"])
        const conflict = yield* execute({ ...body, input: "other" }, { "idempotency-key": "order-42" })
        assert.strictEqual(conflict.status, 409)
        yield* waitFinal(first.body.executionId)
        const client = yield* TestClient
        const list = yield* client.request("GET", "/api/v1/executions", { headers: TestServer.bearer(key) })
        assert.strictEqual(list.body.total, 1)
        assert.strictEqual(fake.requests.length, 3)
      })
    )
  })
})
