import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// Small bounds, so that each one is easy to cross: a prompt may render to 300
// characters, an input is at most 100 and a variable value at most 50.
const withFake = TestServer.layerWithFakeOpenAi(openaiKey, {
  maxMessageChars: 100,
  maxPromptChars: 300,
  maxVariableChars: 50,
  maxVariables: 2,
  maxVariableNameChars: 64,
  maxSteps: 3
})

const setUp = Effect.gen(function* () {
  const client = yield* TestClient
  const account = yield* TestServer.signUp()
  const key = yield* TestServer.createKey(account, ["execute", "read"])
  const agent = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
  const define = (steps: ReadonlyArray<Record<string, unknown>>) =>
    client.request("POST", "/api/orchestrations", {
      headers: TestServer.bearer(account.token),
      body: { name: "Flow", steps: steps.map((step) => ({ agentId: agent.id, ...step })) }
    })
  const execute = (orchestrationId: string, body: unknown) =>
    client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
      headers: TestServer.bearer(key.key),
      body
    })
  const waitFinal = (id: string) =>
    eventually(
      Effect.map(
        client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key.key) }),
        (response) => {
          assert.include(["completed", "failed", "cancelled"], response.body.status, "the execution finished")
          return response.body
        }
      ),
      { timeoutMs: 15_000 }
    )
  return { account, agentId: agent.id, define, execute, waitFinal }
})

layer(withFake, { excludeTestServices: true })("bounded cost per request", (it) => {
  describe("definitions", () => {
    it.effect(
      "a prompt that could render past MAX_PROMPT_CHARS from input and variables is a 400 naming the step",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const { account, agentId, define } = yield* setUp
          // The amplification of the review: 3,555 copies of the input in one prompt.
          const bomb = yield* define([
            { id: "fine", prompt: "Say {{input}}" },
            { id: "bomb", prompt: "{{input}}".repeat(3555) }
          ])
          assert.strictEqual(bomb.status, 400, bomb.text)
          assert.match(bomb.headers.get("content-type") ?? "", /^application\/problem\+json/)
          assert.deepStrictEqual(
            bomb.body.errors.map((e: { path: Array<unknown> }) => e.path),
            [["payload", "steps", 1, "prompt"]]
          )
          assert.include(bomb.body.errors[0].message, "`bomb`")
          assert.include(bomb.body.errors[0].message, "355500")
          assert.include(bomb.body.detail, "MAX_PROMPT_CHARS")

          // Three inputs (300) and two characters of text are 302: over by two.
          const over = yield* define([{ id: "three", prompt: "{{input}} {{input}} {{input}}" }])
          assert.strictEqual(over.status, 400, over.text)
          assert.include(over.body.errors[0].message, "302")
          // Input and variables at their largest, 100 + 2 x 50 + text: within.
          const within = yield* define([{ id: "mix", prompt: "{{input}}:{{variables.a}}:{{variables.b}}" }])
          assert.strictEqual(within.status, 201, within.text)
          // Step outputs have no size before the run: they are checked then.
          const outputs = yield* define([
            { id: "a", prompt: "{{input}}" },
            { id: "b", prompt: "{{steps.a.output}}".repeat(100), dependsOn: ["a"] }
          ])
          assert.strictEqual(outputs.status, 201, outputs.text)

          const update = yield* client.request("PUT", `/api/orchestrations/${within.body.id}`, {
            headers: TestServer.bearer(account.token),
            body: { steps: [{ id: "again", agentId, prompt: "{{variables.x}}".repeat(7) }] }
          })
          assert.strictEqual(update.status, 400, update.text)
          assert.deepStrictEqual(update.body.errors[0].path, ["payload", "steps", 0, "prompt"])
          assert.include(update.body.errors[0].message, "`again`")
        })
    )

    it.effect("more steps than MAX_STEPS is a 400 naming the steps", () =>
      Effect.gen(function* () {
        const { define } = yield* setUp
        const four = yield* define(["a", "b", "c", "d"].map((id) => ({ id, prompt: "Hi" })))
        assert.strictEqual(four.status, 400, four.text)
        assert.deepStrictEqual(four.body.errors[0].path, ["payload", "steps"])
        assert.include(four.body.errors[0].message, "at most 3 steps")
        const three = yield* define(["a", "b", "c"].map((id) => ({ id, prompt: "Hi" })))
        assert.strictEqual(three.status, 201, three.text)
      })
    )
  })

  describe("execute requests", () => {
    it.effect("input, variable count, name length and value length over their bounds are 400s naming the field", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const { define, execute } = yield* setUp
        const created = yield* define([{ id: "s", prompt: "{{input}} {{variables.a}}" }])
        const id = created.body.id as string
        const refused = (body: unknown, path: ReadonlyArray<string>, text: string) =>
          Effect.gen(function* () {
            const response = yield* execute(id, body)
            assert.strictEqual(response.status, 400, response.text)
            assert.match(response.headers.get("content-type") ?? "", /^application\/problem\+json/)
            assert.deepStrictEqual(response.body.errors[0].path, path)
            assert.include(response.body.errors[0].message, text)
          })
        yield* refused({ input: "x".repeat(101), variables: { a: "1" } }, ["payload", "input"], "at most 100")
        yield* refused({ input: "x", variables: { a: "1", b: "2", c: "3" } }, ["payload", "variables"], "MAX_VARIABLES")
        const longName = "n".repeat(65)
        yield* refused(
          { input: "x", variables: { a: "1", [longName]: "2" } },
          ["payload", "variables", `${"n".repeat(64)}…`],
          "MAX_VARIABLE_NAME_CHARS"
        )
        yield* refused(
          { input: "x", variables: { a: "v".repeat(51) } },
          ["payload", "variables", "a"],
          "MAX_VARIABLE_CHARS"
        )
        // Nothing was run for any of them.
        assert.strictEqual(fake.requests.length, 0)
        const accepted = yield* execute(id, { input: "x".repeat(100), variables: { a: "v".repeat(50), b: "2" } })
        assert.strictEqual(accepted.status, 202, accepted.text)
      })
    )
  })

  describe("runs", () => {
    it.effect(
      "a step whose prompt renders past MAX_PROMPT_CHARS fails with a clear error; the node stays healthy",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const fake = yield* FakeOpenAi
          fake.reset()
          fake.setDefault({ text: "short" })
          const { define, execute, waitFinal } = yield* setUp
          const created = yield* define([
            { id: "a", prompt: "Say {{input}}" },
            { id: "b", prompt: "{{steps.a.output}}|{{steps.a.output}}", dependsOn: ["a"] }
          ])
          assert.strictEqual(created.status, 201, created.text)
          // Step a answers 200 characters, so step b would render 401.
          fake.script({ text: "y".repeat(200) })
          const started = yield* execute(created.body.id, { input: "go" })
          assert.strictEqual(started.status, 202, started.text)
          const failed = yield* waitFinal(started.body.executionId)
          assert.strictEqual(failed.status, "failed")
          assert.strictEqual(failed.error, "Step b: its prompt renders to more than 300 characters (MAX_PROMPT_CHARS)")
          // Step b never reached the model: no request carried a's output.
          const sent = fake.requests.map((request) => JSON.stringify(request.body.messages))
          assert.isTrue(sent.some((messages) => messages.includes("Say go")))
          assert.isFalse(sent.some((messages) => messages.includes("y".repeat(200))))

          const live = yield* client.request("GET", "/health/live")
          assert.strictEqual(live.status, 200)
          const next = yield* execute(created.body.id, { input: "again" })
          const completed = yield* waitFinal(next.body.executionId)
          assert.strictEqual(completed.status, "completed", JSON.stringify(completed))
          assert.strictEqual(completed.output, "short")
        })
    )
  })
})
